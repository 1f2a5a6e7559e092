// Grouped point to point (Comm::sendRecv) and the collectives lowered onto it, plus
// reduceScatterV, on CUDA comms through NCCL (one GPU per rank, 2..8 GPUs), against host
// references: any listing order, several messages per pair, messages to the rank itself, zero
// sizes, a large exchange both ways, async work on another stream, CUDA-graph capture and replay.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

size_t msgCount(uint64_t seed, int src, int dst, int k) {
  switch (mix(seed * 977 + uint64_t(src) * 131 + uint64_t(dst) * 17 + uint64_t(k)) % 5) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 1001;
    case 3: return (1 << 20) + 3;
    default: return 77;
  }
}
uint64_t msgSeed(uint64_t seed, int dst, int k) { return seed * 1000003 + uint64_t(dst) * 64 + k; }

std::vector<std::pair<int, int>> listing(uint64_t seed, int rank, int size, int perPeer, int salt) {
  std::vector<int> peers;
  for (int p = 0; p < size; ++p)
    for (int k = 0; k < perPeer; ++k) peers.push_back(p);
  std::mt19937_64 g(mix(seed + uint64_t(rank) * 31 + uint64_t(salt)));
  std::shuffle(peers.begin(), peers.end(), g);
  std::vector<int> next(size_t(size), 0);
  std::vector<std::pair<int, int>> out;
  for (int p : peers) out.push_back({p, next[size_t(p)]++});
  return out;
}

// Every rank sends perPeer messages to every rank (itself included) in its own order.
void groupRound(Comm& c, int rank, int size, uint64_t seed, DataType t, CollOptions o) {
  const size_t es = dtypeSize(t);
  std::vector<char*> sendBufs, recvBufs;
  std::vector<P2PSend> sends;
  std::vector<P2PRecv> recvs;
  std::vector<std::pair<int, int>> who;
  for (auto [p, k] : listing(seed, rank, size, 3, 1)) {
    const size_t cnt = msgCount(seed, rank, p, k);
    sendBufs.push_back(h2d(genBuf(t, RedOpKind::SUM, msgSeed(seed, p, k), rank, cnt)));
    sends.push_back({p, sendBufs.back(), cnt});
  }
  for (auto [p, k] : listing(seed, rank, size, 3, 2)) {
    const size_t cnt = msgCount(seed, p, rank, k);
    recvBufs.push_back(poisoned(cnt * es));
    recvs.push_back({p, recvBufs.back(), cnt});
    who.push_back({p, k});
  }
  auto w = c.sendRecv(sends, recvs, t, o);
  w->waitBlocking();
  for (size_t j = 0; j < recvs.size(); ++j) {
    const auto [p, k] = who[j];
    const size_t bytes = recvs[j].count * es;
    auto got = d2h(recvBufs[j], bytes + 1);
    auto want = genBuf(t, RedOpKind::SUM, msgSeed(seed, rank, k), p, recvs[j].count);
    MP_CHECK(std::memcmp(got.data(), want.data(), bytes) == 0, "%s: message %d from rank %d", dtypeName(t), k, p);
    MP_CHECK(uint8_t(got[bytes]) == 0xff, "message %d from rank %d: wrote past the end", k, p);
  }
  for (char* b : sendBufs) CK(cudaFree(b));
  for (char* b : recvBufs) CK(cudaFree(b));
}

}  // namespace

TEST(GpuGrouped, SendRecvAnyOrder) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(gpuWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    for (const char* backend : {"cclx", "nccl"}) {
      Options opts;
      opts.backend = backend;
      opts.name = backend;
      auto c = makeGpuComm(rank, size, store, opts);
      cudaStream_t user, other;
      CK(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking));
      CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
      CollOptions o;
      o.stream = user;
      uint64_t seed = 10;
      for (DataType t : {DataType::f32, DataType::bf16, DataType::fp8_e4m3, DataType::i64})
        groupRound(*c, rank, size, ++seed, t, o);
      o.async = true;  // on the internal stream; waitBlocking in groupRound
      groupRound(*c, rank, size, ++seed, DataType::f64, o);
      // 64 MiB both ways around a ring, both sides listing the send first.
      const size_t big = size_t(16) << 20;
      auto in = genBuf(DataType::f32, RedOpKind::SUM, 99, rank, big);
      char* s = h2d(in);
      char* r = poisoned(big * 4);
      const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
      CollOptions so;
      so.stream = user;
      c->sendRecv({{next, s, big}}, {{prev, r, big}}, DataType::f32, so);
      CK(cudaStreamSynchronize(user));
      MP_CHECK(d2h(r, big * 4) == genBuf(DataType::f32, RedOpKind::SUM, 99, prev, big), "ring of 64 MiB");
      CK(cudaFree(s));
      CK(cudaFree(r));
      CK(cudaStreamDestroy(user));
      CK(cudaStreamDestroy(other));
      c->finalize();
    }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuGrouped, LoweredCollectivesAndReduceScatterV) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(gpuWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    const size_t N = size_t(size);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CollOptions o;
    o.stream = s;
    for (DataType t : {DataType::f32, DataType::bf16, DataType::i32})
      for (size_t count : {0ul, 1ul, 4099ul}) {
        const size_t es = dtypeSize(t), bytes = count * es;
        for (int root : {0, size - 1}) {
          // scatter (in place on the root), gather, gatherSingle.
          std::vector<std::vector<char>> blocks(N);
          std::vector<char*> dblocks(N);
          std::vector<const void*> ins(N);
          for (size_t r = 0; r < N; ++r) {
            blocks[r] = genBuf(t, RedOpKind::SUM, 40 + count, int(r), count);
            dblocks[r] = h2d(blocks[r]);
            ins[r] = dblocks[r];
          }
          char* out = poisoned(bytes);
          c->scatter(rank == root ? ins : std::vector<const void*>{}, out, count, t, root, o);
          if (rank == root) c->scatter(ins, dblocks[size_t(rank)], count, t, root, o);
          else c->scatter({}, out, count, t, root, o);
          std::vector<char*> gouts(N);
          std::vector<void*> gp(N);
          for (size_t r = 0; r < N; ++r) gp[r] = gouts[r] = poisoned(bytes);
          c->gather(dblocks[size_t(rank)], gp, count, t, root, o);
          char* single = poisoned(N * bytes);
          c->gatherSingle(dblocks[size_t(rank)], single, count, t, root, o);
          CK(cudaStreamSynchronize(s));
          MP_CHECK(d2h(out, bytes) == blocks[size_t(rank)], "scatter %s count %zu root %d", dtypeName(t), count, root);
          if (rank == root) {
            auto all = d2h(single, N * bytes);
            for (size_t r = 0; r < N; ++r) {
              MP_CHECK(d2h(gouts[r], bytes) == blocks[r], "gather block %zu", r);
              MP_CHECK(std::memcmp(all.data() + r * bytes, blocks[r].data(), bytes) == 0, "gatherSingle block %zu", r);
            }
          }
          for (size_t r = 0; r < N; ++r) {
            CK(cudaFree(dblocks[r]));
            CK(cudaFree(gouts[r]));
          }
          CK(cudaFree(out));
          CK(cudaFree(single));
        }
        // allGatherV in place; allToAllList with uneven pairs.
        std::vector<size_t> counts(N);
        for (size_t r = 0; r < N; ++r) counts[r] = count ? count + 3 * r : r % 2;
        std::vector<char*> vb(N);
        std::vector<void*> vp(N);
        for (size_t r = 0; r < N; ++r) vp[r] = vb[r] = poisoned(counts[r] * es);
        auto mine = genBuf(t, RedOpKind::SUM, 50, rank, counts[size_t(rank)]);
        CK(cudaMemcpy(vb[size_t(rank)], mine.data(), mine.size(), cudaMemcpyHostToDevice));
        c->allGatherV(vb[size_t(rank)], vp, counts, t, o);
        auto pc = [&](size_t i, size_t j) { return count ? (count + 7 * i + 3 * j) % (count + 11) : (i + j) % 2; };
        std::vector<char*> sb(N), rb(N);
        std::vector<const void*> sp(N);
        std::vector<void*> rp(N);
        std::vector<size_t> sc(N), rc(N);
        for (size_t j = 0; j < N; ++j) {
          sc[j] = pc(size_t(rank), j);
          rc[j] = pc(j, size_t(rank));
          sp[j] = sb[j] = h2d(genBuf(t, RedOpKind::SUM, 60 + j, rank, sc[j]));
          rp[j] = rb[j] = poisoned(rc[j] * es);
        }
        c->allToAllList(sp, sc, rp, rc, t, o);
        CK(cudaStreamSynchronize(s));
        for (size_t r = 0; r < N; ++r) {
          MP_CHECK(d2h(vb[r], counts[r] * es) == genBuf(t, RedOpKind::SUM, 50, int(r), counts[r]), "allGatherV block %zu", r);
          MP_CHECK(d2h(rb[r], rc[r] * es) == genBuf(t, RedOpKind::SUM, 60 + size_t(rank), int(r), rc[r]),
                   "allToAllList from %zu", r);
          CK(cudaFree(vb[r]));
          CK(cudaFree(sb[r]));
          CK(cudaFree(rb[r]));
        }
        // reduceScatterV: float64 reference (NCCL's order), exact for integers.
        for (ReduceOp op : {ReduceOp(RedOpKind::SUM), ReduceOp(RedOpKind::MAX), ReduceOp::premulSum(2.0)}) {
          std::vector<size_t> first(N + 1, 0);
          for (size_t r = 0; r < N; ++r) first[r + 1] = first[r] + counts[r];
          std::vector<std::vector<char>> all(N);
          for (size_t p = 0; p < N; ++p) all[p] = genBuf(t, op.kind, 70, int(p), first[N]);
          char* din = h2d(all[size_t(rank)]);
          std::vector<const void*> ins(N);
          for (size_t r = 0; r < N; ++r) ins[r] = din + first[r] * es;
          char* dout = poisoned(counts[size_t(rank)] * es);
          c->reduceScatterV(ins, counts, dout, t, op, o);
          CK(cudaStreamSynchronize(s));
          auto got = d2h(dout, counts[size_t(rank)] * es);
          for (size_t i = 0; i < counts[size_t(rank)]; ++i) {
            const size_t at = first[size_t(rank)] + i;
            std::vector<std::vector<char>> slice(N);
            for (size_t p = 0; p < N; ++p) slice[p].assign(all[p].begin() + at * es, all[p].begin() + (at + 1) * es);
            if (isFloat(t)) {
              double ref = refF64(t, op, slice, 0), g = toDouble(t, got.data() + i * es);
              MP_CHECK(std::fabs(g - ref) <= 2 * tolerance(t) * (1 + std::fabs(ref)), "reduceScatterV %s [%zu] %g vs %g",
                       dtypeName(t), i, g, ref);
            } else {
              auto want = fixedOrder(t, op, slice, 1);
              MP_CHECK(std::memcmp(want.data(), got.data() + i * es, es) == 0, "reduceScatterV %s [%zu]", dtypeName(t), i);
            }
          }
          CK(cudaFree(din));
          CK(cudaFree(dout));
        }
      }
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuGrouped, GraphCaptureAndReplay) {
  GPU_REQUIRE(2);
  auto res = test::runRanks(gpuWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    auto c = makeGpuComm(rank, size, store);
    const size_t N = size_t(size), count = 12345;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CollOptions o;
    o.stream = s;
    std::vector<size_t> counts(N, count);
    char* in = poisoned(count * 4);
    std::vector<char*> outs(N);
    std::vector<void*> op(N);
    for (size_t r = 0; r < N; ++r) op[r] = outs[r] = poisoned(count * 4);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    c->allGatherV(in, op, counts, DataType::f32, o);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int it = 0; it < 3; ++it) {
      auto v = genBuf(DataType::f32, RedOpKind::SUM, 80 + it, rank, count);
      CK(cudaMemcpyAsync(in, v.data(), v.size(), cudaMemcpyHostToDevice, s));
      CK(cudaGraphLaunch(exec, s));
      CK(cudaStreamSynchronize(s));
      for (size_t r = 0; r < N; ++r)
        MP_CHECK(d2h(outs[r], count * 4) == genBuf(DataType::f32, RedOpKind::SUM, 80 + it, int(r), count),
                 "replay %d block %zu", it, r);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaFree(in));
    for (char* p : outs) CK(cudaFree(p));
    CK(cudaStreamDestroy(s));
    c->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

#else
TEST(GpuGrouped, Skipped) { GTEST_SKIP() << "built without CUDA"; }
#endif
