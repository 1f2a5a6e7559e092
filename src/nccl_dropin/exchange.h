// The drop-in's setup exchange (core/setup_sequence.h) through the application's own NCCL comm:
// an all-gather of fixed-size records with the real ncclAllGather on a stream of the drop-in's.
//
// NCCL operations of one comm pair up across ranks by order and cannot be cancelled, so:
// * everything an exchange needs is allocated when the comm is created (a rank that cannot
//   allocate it fails creation instead of missing an exchange);
// * a record is copied from pinned memory, one slot per exchange (an exchange enqueued behind a
//   stuck one never waits on the host and never overwrites a record still to be copied);
// * a wait that passes its deadline (or sees the comm aborted) leaves the all-gather pending:
//   contribute() then still enqueues the remaining exchanges, so this rank's sequence of NCCL
//   operations stays that of its peers, and the application's next call pairs with theirs;
// * memory an operation may still use is never freed: the destructor frees it once every
//   enqueued operation completed, else leaves it allocated (counted in a log line).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "core/setup_sequence.h"
#include "gpu/resources.h"
#include "nccl_dropin/abi.h"

namespace cclx {
namespace dropin {

class NcclExchange final : public Exchange {
 public:
  static constexpr size_t kRecord = 4096;  // bytes per rank and exchange
  static constexpr int kMaxSteps = 4;      // exchanges of one setup (gpu/peer_mem.h has 3)

  /// Allocates the buffers on `device` (throws cclx::Error).
  explicit NcclExchange(int device);
  ~NcclExchange() override;

  /// Binds the exchange to a comm for its setup: this rank, the comm's size, the deadline of
  /// every wait, and a flag that stops them (the comm is being aborted).
  void begin(ncclComm_t comm, int rank, int size, gpurt::Deadline deadline,
             const std::atomic<bool>* cancel);

  std::vector<std::string> allGather(const std::string& tag, const std::string& mine) override;
  void contribute(const std::string& tag, const std::string& mine) override;

 private:
  void enqueue(const std::string& tag, const std::string& mine, bool gather);
  void settle(gpurt::Deadline deadline);

  int device_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  gpurt::Deadline deadline_ = gpurt::Deadline::max();
  const std::atomic<bool>* cancel_ = nullptr;
  int steps_ = 0;
  bool pending_ = false;  // enqueued work whose completion was not observed
  gpures::Stream stream_;
  gpures::DeviceMem dev_;     // kMaxRanks records
  gpures::PinnedMem pinned_;  // kMaxSteps send records, then kMaxRanks received records
  gpures::Event done_;        // after the last enqueued operation
};

}  // namespace dropin
}  // namespace cclx
