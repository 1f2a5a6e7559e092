// src/host/algos: the host (shared-memory) algorithms: one collective algorithm per file, each
// answering "can I run these arguments?" and "run them" over the step protocol of host/shm.h.
// Each is the CPU twin of a row of the algorithm catalogue (core/select/algorithms.def), which
// names its factory; the host backend makes one object per row (host/registry.cc) and runs the
// one select() returns.
#pragma once

#include <memory>

#include "core/comm/backend.h"
#include "core/select/algo_set.h"

namespace cclx {

struct HostCtx;  // host/shm.h: this rank's view of the shared-memory transport
class HostAlgo;

/// A host algorithm. Contract: its factory, `std::unique_ptr<HostAlgo> makeHost...()`, is named by
/// its catalogue row and defined in its file; run() is only called for the collectives the row
/// gives it and for arguments canRun() accepted.
class HostAlgo {
 public:
  virtual ~HostAlgo() = default;
  /// True when it can run these (validated) arguments on this comm (default: always).
  virtual bool canRun(const CollArgs& args, const HostCtx& ctx) const { return true; }
  /// Runs the collective to completion on the calling thread.
  virtual void run(const CollArgs& args, HostCtx& ctx) = 0;
};

/// The host algorithm that is the function `Run` (it accepts every call of its collectives).
template <void (*Run)(const CollArgs&, HostCtx&)>
std::unique_ptr<HostAlgo> hostAlgo() {
  struct Fn final : HostAlgo {
    void run(const CollArgs& a, HostCtx& ctx) override { Run(a, ctx); }
  };
  return std::make_unique<Fn>();
}

/// Every object of the host backend, one per catalogue line it has a factory for (registry.cc).
AlgoSet<HostAlgo> makeHostAlgorithms();

/// The local part of the unfused sequence: rows [row0, row0 + rows) of a.rms's outputs from `ar`,
/// the allreduce result of those rows (rows of hidden elements of a.dtype, row0 first).
void hostRmsRows(const CollArgs& a, const void* ar, size_t row0, size_t rows);

}  // namespace cclx
