// Naming the rank a timeout is really about. A rank that times out waiting for peers names them;
// but a peer it waited for may itself have been waiting, stalled behind a third rank (a rank that
// died, say): the two-shot kernels of 8 ranks at 1 call apart show this. Each rank publishes whom
// it was waiting for when its wait stopped (gpu: control word kCtlWaitingFor, device/fail.cuh),
// and the message follows those waits to their end.
//
// Contract (pure, no I/O):
//  * `missing`: the ranks the timed-out rank waited for (bit r: rank r);
//  * `waitingFor[r]`, r < size: the ranks rank r published that it was waiting for when its own
//    wait stopped, 0 when it published none (dead, slow, or never blocked);
//  * the result: the ranks the chain of waits from `missing` ends at (ranks in it that published
//    no wait), never `self`; 0 when that adds nothing to `missing` (every rank in `missing`
//    published none, or the waits only lead back in a cycle).
#pragma once

#include <cstdint>
#include <string>

namespace cclx {

uint32_t waitChainEnd(uint32_t missing, const uint32_t* waitingFor, int size, int self);

/// " (rank(s) A were themselves waiting; the waits end at rank(s) B)" for waitChainEnd's result,
/// or "" when it is 0.
std::string waitChainNote(uint32_t missing, const uint32_t* waitingFor, int size, int self);

}  // namespace cclx
