// The drop-in's setup exchange (core/failure/setup_sequence.h) through the application's own NCCL comm:
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
// * memory an operation may still use is never reused or freed: the destructor hands the
//   buffers back to a per-device pool for the next comm's setup once every enqueued operation
//   completed (no free, so no wait for the device while the application runs), else leaves them
//   allocated (counted in a log line).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/failure/setup_sequence.h"
#include "gpu/resources.h"
#include "nccl_dropin/abi.h"

namespace cclx {
namespace dropin {

class NcclExchange final : public Exchange {
 public:
  static constexpr size_t kRecord = 4096;  // bytes per rank and exchange
  static constexpr int kMaxSteps = 4;      // exchanges of one setup (gpu/peer_mem.h has 3)

  /// Takes the buffers on `device` from the pool, or allocates them (throws cclx::Error).
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

  struct Buffers {
    int device = -1;
    gpures::Stream stream;
    gpures::DeviceMem dev;     // kMaxRanks records
    gpures::PinnedMem pinned;  // kMaxSteps send records, then kMaxRanks received records
    gpures::Event done;        // after the last enqueued operation
  };
  static std::vector<std::unique_ptr<Buffers>>& pool();  // guarded by a mutex in exchange.cc
  static std::unique_ptr<Buffers> takeBuffers(int device);
  static void giveBack(std::unique_ptr<Buffers> b);

  int device_;
  std::unique_ptr<Buffers> b_;
  ncclComm_t comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  gpurt::Deadline deadline_ = gpurt::Deadline::max();
  const std::atomic<bool>* cancel_ = nullptr;
  int steps_ = 0;
  bool pending_ = false;  // enqueued work whose completion was not observed
};

}  // namespace dropin
}  // namespace cclx
