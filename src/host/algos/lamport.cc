// Data-as-flag ("Lamport") allreduce over the host transport: the CPU twin of
// src/algos/dda_lamport.cu, with the element rules of lamport.h. Every rank writes its whole input,
// canonicalized, into inbox [parity][rank] of every peer with 8-byte release stores, then takes
// each peer's vectors from its own inbox by polling until no element is all ones, refills them
// with ones, and reduces all ranks in order 0..N-1 (its own input canonicalized the same way).
// No step or counter is exchanged. Inbox reuse follows the GPU kernel's argument: a peer writes
// parity p again two calls later, after it has seen this rank's data of the call in between, which
// this rank wrote only after its refills of parity p. Messages larger than one inbox run the
// tree (canRun() says no).
#include <atomic>
#include <cstring>
#include <vector>

#include "host/algos/algos.h"
#include "host/algos/reduce_kernels.h"
#include "host/shm.h"
#include "core/elements/lamport.h"

namespace cclx {
namespace {

template <int S>
void exchange(HostCtx& ctx, const char* send, char* const* contrib, size_t bytes) {
  const int N = ctx.size, me = ctx.rank;
  const int par = int(ctx.lamportCalls & 1);
  const size_t pieces = (bytes + 15) / 16 * 2;  // 8-byte pieces, zero-padded to whole vectors
  std::vector<uint64_t> own(pieces, 0);
  std::memcpy(own.data(), send, bytes);
  for (auto& w : own) w = lamport::canon<S>(w);
  for (int r = 0; r < N; ++r) {
    if (r == me) continue;
    auto* dst = reinterpret_cast<uint64_t*>(ctx.lamportInbox(r, par, me));
    for (size_t i = 0; i < pieces; ++i)
      std::atomic_ref<uint64_t>(dst[i]).store(own[i], std::memory_order_release);
  }
  std::memcpy(contrib[me], own.data(), bytes);
  std::vector<uint64_t> in(pieces);
  for (int r = 0; r < N; ++r) {
    if (r == me) continue;
    auto* box = reinterpret_cast<uint64_t*>(ctx.lamportInbox(me, par, r));
    for (size_t i = 0; i < pieces; ++i) {
      std::atomic_ref<uint64_t> w(box[i]);
      ctx.pollUntil(r, [&] { return !lamport::hasEmpty<S>(in[i] = w.load(std::memory_order_acquire)); });
    }
    for (size_t i = 0; i < pieces; ++i)
      std::atomic_ref<uint64_t>(box[i]).store(lamport::kEmpty, std::memory_order_release);
    std::memcpy(contrib[r], in.data(), bytes);
  }
}

class HostLamportAllReduce final : public HostAlgo {
 public:
  bool canRun(const CollArgs& a, const HostCtx& ctx) const override {
    return a.type == CollType::AllReduce && ctx.size >= 2 && lamport::typeSupported(a.dtype) &&
           (a.bytes() + 15) / 16 * 16 <= ctx.lamportBytes();
  }
  void run(const CollArgs& a, HostCtx& ctx) override {
    const size_t bytes = a.bytes();
    std::vector<std::vector<char>> buf(size_t(ctx.size), std::vector<char>(bytes));
    std::vector<char*> contrib;
    for (auto& b : buf) contrib.push_back(b.data());
    switch (dtypeSize(a.dtype)) {
      case 2: exchange<2>(ctx, static_cast<const char*>(a.send), contrib.data(), bytes); break;
      case 4: exchange<4>(ctx, static_cast<const char*>(a.send), contrib.data(), bytes); break;
      default: exchange<8>(ctx, static_cast<const char*>(a.send), contrib.data(), bytes); break;
    }
    ++ctx.lamportCalls;
    std::vector<const void*> srcs(contrib.begin(), contrib.end());
    reduceInto(a.recv, srcs.data(), ctx.size, a.count, a.dtype, a.op, ctx.size);
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostLamportAllReduce() { return std::make_unique<HostLamportAllReduce>(); }
}  // namespace cclx
