// src/core/failure: how a comm fails. This file: failure handling shared by every comm;
// setup_sequence.h: the collective setup sequence every rank finishes alike (and its test-only
// failure injection).
//
// Failure handling shared by every comm (docs/design/failure.md): one watchdog thread
// per process that polls every live comm's backend every ~100 ms (device error words, NCCL's
// asynchronous errors, NCCL operations past their timeout, CUDA-graph replays included through
// the error words), and the one place that decides what a comm's failure does: with
// abort-on-error on, print one line naming the comm, the op and the cause (missing ranks and
// timeout), run the comm's abort hooks and abort the process; otherwise the comm stays failed and
// its next call, Work::wait / waitBlocking / isCompleted throw.
#pragma once

#include <cclx/cclx.hpp>

#include <functional>
#include <map>
#include <string>

namespace cclx {

struct CommState;

/// What ending the process for a comm's failure takes, copied out of the comm (so that its hooks
/// run without any lock held and whatever happens to the comm meanwhile).
struct Fatal {
  std::string name, reason, line;
  std::map<int, std::function<void(const std::string&)>> hooks;
};
Fatal prepareFatal(CommState& st, cclxResult_t code, const std::string& msg, const std::string& op);
/// Prints the line, runs the hooks, aborts the process.
[[noreturn]] void executeFatal(Fatal& f);

/// True for the failures abort-on-error ends the process for: timeouts, a peer's failure, NCCL,
/// CUDA, system and internal errors (not invalid arguments, unsupported calls, use after
/// finalize, or this rank's own abort()).
bool fatalCode(cclxResult_t code);

/// A comm failed with `code` / `msg` during `op` ("" when the watchdog found it): with
/// abort-on-error on, prints the line, runs the abort hooks and aborts the process (never
/// returns); otherwise does nothing (the backend already holds the failure).
void commFailed(CommState& st, cclxResult_t code, const std::string& msg, const std::string& op);

/// Records a failure that breaks the comm (fatalCode) for Comm::dump() (comm_dump.cc); the first
/// one is kept. Other codes (bad arguments, unsupported calls) are not the comm's state.
void noteFailure(CommState& st, cclxResult_t code, const std::string& msg, const std::string& op);

/// Runs the comm's abort hooks once (each hook's exceptions are caught and logged).
void runAbortHooks(CommState& st, const std::string& reason);

/// The watchdog: comms are watched from creation until finalize / abort / destruction. remove()
/// waits for a poll in progress, so the backend may be torn down after it returns.
void watchdogAdd(CommState* st);
void watchdogRemove(CommState* st);

}  // namespace cclx
