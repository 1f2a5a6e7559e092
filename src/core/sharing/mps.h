// Ranks that share one GPU under MPS (CUDA's multi-process service): when their kernels can
// hold every SM at once. Pure rules (no GPU runtime), so the CPU tests check them.
//
// Without MPS a GPU time-slices between the processes' contexts, so a rank's kernel that waits
// for a peer (every direct-access kernel does) is switched out and the peer's kernel runs. Under
// MPS the ranks' kernels run side by side without preemption: one rank's grid can take every SM
// while it waits for a peer whose kernel then never starts, a deadlock that ends only at the
// call's device-side deadline (an error naming the missing ranks, NaN outputs). Limiting each
// rank to its share of the SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE <= 100 / ranks on the GPU)
// leaves room for every rank's kernel at once.
#pragma once

#include <string>

namespace cclx {

/// The largest CUDA_MPS_ACTIVE_THREAD_PERCENTAGE that leaves room for all `ranksOnGpu` ranks'
/// kernels at once (100 / ranksOnGpu, rounded down; 100 for one rank).
int mpsThreadPercentLimit(int ranksOnGpu);

/// "" when ranks sharing a GPU cannot starve each other of SMs: fewer than two ranks on it, MPS
/// off, or this rank's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (`percentEnv`, null when unset; then
/// the daemon's default applies, taken as 100) within mpsThreadPercentLimit. Otherwise what is
/// wrong and what to set, naming the GPU (`bus`).
std::string mpsShareProblem(const std::string& bus, int ranksOnGpu, bool mps,
                            const char* percentEnv);

}  // namespace cclx
