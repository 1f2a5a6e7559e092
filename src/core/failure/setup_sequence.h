// Collective setup that every rank finishes alike (docs/design/failure.md "Setup,
// teardown and abort").
//
// A setup is a fixed sequence of exchanges (all-gathers of one record per rank) that every rank
// runs to the end, in the same order, whatever happened before: a rank that failed locally still
// takes part in every remaining exchange and sends its error instead of its data. So a transport
// whose operations pair up by order (the NCCL drop-in's all-gathers on the application's comm)
// never pairs a setup exchange with an application call, and every rank that completes an
// exchange sees the same records and reaches the same verdict.
//
// An exchange that itself fails on a rank (its deadline passed, the transport failed) "breaks"
// the sequence there: that rank can no longer know what the others decided. It still takes part
// in the remaining exchanges (contribute(): published, never waited for), so the others learn of
// its failure at the next exchange; only a break at the last exchange can leave the others
// believing setup succeeded, which the caller must cover (peer memory raises the comm's abort
// word on every rank, gpu/peer_mem.cc).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/settings/config.h"
#include "base/error.h"

namespace cclx {

/// How ranks trade setup records: every rank calls allGather() with the same tag and gets every
/// rank's value (index = rank). Comms made by cclx go through their store, the NCCL drop-in
/// through the application's NCCL comm.
class Exchange {
 public:
  virtual ~Exchange() = default;
  /// Throws (cclxTimeout naming the missing ranks, or the transport's error) when a rank does
  /// not take part in time.
  virtual std::vector<std::string> allGather(const std::string& tag, const std::string& mine) = 0;
  /// Takes part in an exchange whose result this rank will not use (its sequence broke): the
  /// value reaches the ranks that still wait, and an ordered transport keeps every rank's
  /// sequence of operations the same. Never waits for other ranks; never throws.
  virtual void contribute(const std::string& tag, const std::string& mine) = 0;
};

/// One rank's side of a setup sequence (see the file comment).
class SetupSequence {
 public:
  SetupSequence(Exchange& ex, int rank, int size) : ex_(ex), rank_(rank), size_(size) {}

  /// One exchange. Unless this rank already failed, runs `local` for its record (an exception
  /// fails this rank with its message); publishes the record or the failure. Returns every
  /// rank's record when every rank is well, else nullopt (this rank has then failed: locally,
  /// by a peer's report, or because the exchange broke).
  std::optional<std::vector<std::string>> step(const std::string& tag,
                                               const std::function<std::string()>& local);
  /// Fails this rank with `why` (kept: the first failure wins); later steps publish it.
  void fail(cclxResult_t code, const std::string& why);

  bool failed() const { return failed_; }
  /// An exchange failed on this rank (see the file comment).
  bool broken() const { return broken_; }
  cclxResult_t code() const { return code_; }
  const std::string& why() const { return why_; }
  Error error() const { return Error(code_, why_); }
  int rank() const { return rank_; }
  int size() const { return size_; }
  /// Exchanges this rank took part in so far.
  int steps() const { return steps_; }

 private:
  std::string namingRank(const std::string& msg) const;
  Exchange& ex_;
  int rank_, size_;
  int steps_ = 0;
  bool failed_ = false, broken_ = false;
  cclxResult_t code_ = cclxSuccess;
  std::string why_;
};

/// Throws the failure CCLX_TEST_SETUP_FAIL asks for at `stage` of `rank` (test-only; stages:
/// device, who, alloc, open, see docs/SETTINGS.md).
void injectSetupFailure(const Config& cfg, int rank, const char* stage);

}  // namespace cclx
