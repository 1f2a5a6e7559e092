// Point to point where ranks share a GPU (no NCCL comm): batches of sends and receives
// (Comm::sendRecv) and single send / recv on the pipelined exchange, run as rounds of the
// directions that take part (docs/design/dda.md "Point to point"). Every received byte is
// compared with the sender's data, and with what the host twin (a CPU comm of the same ranks)
// receives for the same batch. Also: batches between two ranks while the others do nothing,
// batches and collectives interleaved back to back, CUDA-graph replay, a length that disagrees
// (both ends fail naming the sender, the receive poisoned) and a killed peer (named in the
// timeout).
//
// World size: CCLX_TEST_RANKS (default 4); scripts/gpu_shared.sh runs it at 2, 3, 4, 5 and 8.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

int worldSize() {
  const char* v = std::getenv("CCLX_TEST_RANKS");
  int n = v && *v ? std::atoi(v) : 4;
  return n < 2 ? 2 : n > 8 ? 8 : n;
}

std::shared_ptr<Comm> gpuComm(int rank, int size, std::shared_ptr<Store> store, const char* name,
                              std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  Options o;
  o.name = name;
  o.timeout = timeout;
  return Comm::create(DeviceSpec::cuda(rank % n), o, std::move(store), rank, size);
}

std::shared_ptr<Comm> twinComm(int rank, int size, std::shared_ptr<Store> store, const char* name) {
  Options o;
  o.name = name;
  o.timeout = std::chrono::seconds(120);
  return test::makeCpuComm(rank, size, std::move(store), o);
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { (void)cudaStreamDestroy(s); }
};

// The bytes of the k-th message from `src` to `dst` in round `seed`.
std::vector<char> payload(uint64_t seed, int src, int dst, int k, size_t bytes) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = char(mix(seed * 1000003 + uint64_t(src) * 8191 + uint64_t(dst) * 131 + uint64_t(k) * 7 + i) >> 29);
  return v;
}

// Bytes of the k-th message from src to dst: zero, one byte, odd sizes, several inbox chunks.
size_t msgBytes(uint64_t seed, int src, int dst, int k) {
  switch (mix(seed + uint64_t(src) * 64 + uint64_t(dst) * 8 + uint64_t(k)) % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 4093;
    case 3: return 65537;
    case 4: return (size_t(3) << 20) + 5;  // several chunks per block
    default: return 777 * 3;
  }
}

// Where two byte strings differ: the first and last differing offsets, how many bytes differ,
// and how many of those still hold the poison (0xff: never written).
std::string describeDiff(const std::vector<char>& got, const std::vector<char>& want) {
  size_t first = got.size(), last = 0, n = 0, poison = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    first = std::min(first, i);
    last = i;
    ++n;
    poison += uint8_t(got[i]) == 0xff;
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%zu bytes differ (%zu still 0xff), offsets %zu..%zu, first got 0x%02x want 0x%02x",
                n, poison, first, last, n ? unsigned(uint8_t(got[first])) : 0u,
                n ? unsigned(uint8_t(want[first])) : 0u);
  return buf;
}

// One batch: this rank sends `perPeer` messages to every peer in `peers` (and to itself when
// `self`) and receives as many from each. The lists name the peers in an order of the rank's own
// (rotated by its rank, sends and receives differently), keeping each peer's messages in order.
// Runs on the GPU comm and the twin; checks every receive against the data sent and the twin.
void runBatch(Comm& gpu, Comm& twin, const std::vector<int>& peers, bool self, int perPeer,
              uint64_t seed, int rank, cudaStream_t s, const char* what) {
  std::vector<int> all = peers;
  if (self) all.push_back(rank);
  const size_t m = all.size();
  std::vector<P2PSend> gs, ts;
  std::vector<P2PRecv> gr, tr;
  std::vector<char*> dev;
  std::vector<std::vector<char>> host, twinOut;
  host.reserve(m * size_t(perPeer));
  twinOut.reserve(m * size_t(perPeer));
  struct Expect {
    int src, k;
    size_t bytes;
    char* d;
    const std::vector<char>* t;
  };
  std::vector<Expect> expect;
  for (int k = 0; k < perPeer; ++k)
    for (size_t j = 0; j < m; ++j) {
      const int p = all[(j + size_t(rank)) % m];
      const size_t out = msgBytes(seed, rank, p, k);
      host.push_back(payload(seed, rank, p, k, out));
      char* d = h2d(host.back());
      dev.push_back(d);
      gs.push_back({p, d, out});
      ts.push_back({p, host.back().data(), out});
    }
  for (int k = 0; k < perPeer; ++k)
    for (size_t j = 0; j < m; ++j) {
      const int p = all[(m - 1 - j + size_t(rank) * 2) % m];
      const size_t in = msgBytes(seed, p, rank, k);
      char* r = poisoned(in);
      dev.push_back(r);
      twinOut.emplace_back(in, char(0x5a));
      gr.push_back({p, r, in});
      tr.push_back({p, twinOut.back().data(), in});
      expect.push_back({p, k, in, r, &twinOut.back()});
    }
  CollOptions co;
  co.stream = s;
  gpu.sendRecv(gs, gr, DataType::u8, co);
  twin.sendRecv(ts, tr, DataType::u8);
  CK(cudaStreamSynchronize(s));
  for (const Expect& e : expect) {
    std::vector<char> got = d2h(e.d, e.bytes + 1);
    MP_CHECK(uint8_t(got.back()) == 0xff, "%s: the receive from %d (#%d) wrote past its end", what,
             e.src, e.k);
    got.pop_back();
    const std::vector<char> want = payload(seed, e.src, rank, e.k, e.bytes);
    MP_CHECK(got == want, "%s: receive #%d from rank %d (%zu bytes) differs from the data sent: %s",
             what, e.k, e.src, e.bytes, describeDiff(got, want).c_str());
    MP_CHECK(got == *e.t, "%s: receive #%d from rank %d differs from the host twin's", what, e.k,
             e.src);
  }
  for (char* d : dev) (void)cudaFree(d);
}

}  // namespace

// Batches round the ring and with every rank (itself included), several messages per pair of
// every size class, in orders that differ per rank; then single send / recv pairs.
TEST(GpuSharedP2P, BatchesEqualTheHostTwin) {
  GPU_REQUIRE(1);
  const int n = worldSize();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = gpuComm(rank, size, store, "p2p");
    auto twin = twinComm(rank, size, store, "p2p_twin");
    Stream st;
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    std::vector<int> ring = {next};
    if (prev != next) ring.push_back(prev);
    std::vector<int> everyone;
    for (int r = 0; r < size; ++r)
      if (r != rank) everyone.push_back(r);
    runBatch(*gpu, *twin, ring, false, 3, 11, rank, st.s, "ring batch");
    runBatch(*gpu, *twin, everyone, true, 2, 12, rank, st.s, "all-pairs batch with self");
    runBatch(*gpu, *twin, everyone, false, 1, 13, rank, st.s, "all-pairs batch");
    // Single send / recv (Comm::send / recv: a batch of one each): round the ring, every rank
    // sending first (a message of one inbox chunk per block completes without its receiver).
    std::vector<char> mine = payload(14, rank, next, 0, 100003);
    char* d = h2d(mine);
    char* r = poisoned(mine.size());
    CollOptions co;
    co.stream = st.s;
    gpu->send(d, mine.size(), DataType::u8, next, co);
    gpu->recv(r, mine.size(), DataType::u8, prev, co);
    CK(cudaStreamSynchronize(st.s));
    MP_CHECK(d2h(r, mine.size()) == payload(14, prev, rank, 0, mine.size()), "single send/recv");
    (void)cudaFree(d);
    (void)cudaFree(r);
    gpu->finalize();
    twin->finalize();
  }, std::chrono::seconds(600));
  ASSERT_TRUE(res.ok()) << res.log;
}

// Ranks 0 and 1 exchange while the others do nothing (a batch involves its peers only); then
// batches and allreduces interleave back to back without synchronizing, the same order on both
// ends of every pair; then a batch and an allreduce captured in a CUDA graph replay with fresh
// data.
TEST(GpuSharedP2P, SubsetsInterleavingAndGraphs) {
  GPU_REQUIRE(1);
  const int n = worldSize();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = gpuComm(rank, size, store, "p2p_mix");
    Stream st;
    CollOptions co;
    co.stream = st.s;
    const size_t B = 250001;
    if (rank < 2) {
      const int peer = 1 - rank;
      for (int it = 0; it < 3; ++it) {
        std::vector<char> mine = payload(20 + it, rank, peer, 0, B);
        char* d = h2d(mine);
        char* r = poisoned(B);
        gpu->sendRecv({{peer, d, B}}, {{peer, r, B}}, DataType::u8, co);
        CK(cudaStreamSynchronize(st.s));
        MP_CHECK(d2h(r, B) == payload(20 + it, peer, rank, 0, B), "subset exchange %d", it);
        (void)cudaFree(d);
        (void)cudaFree(r);
      }
    }
    // Everyone again: allreduce, batch, allreduce, batch, ... without synchronizing.
    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const size_t cnt = 3001;
    std::vector<char*> ins, outs, sums;
    for (int it = 0; it < 6; ++it) {
      std::vector<float> v(cnt, float(rank + it));
      std::vector<char> vb(reinterpret_cast<char*>(v.data()), reinterpret_cast<char*>(v.data()) + cnt * 4);
      char* a = h2d(vb);
      gpu->allReduce(a, a, cnt, DataType::f32, RedOpKind::SUM, co);
      std::vector<char> mine = payload(30 + it, rank, next, 0, B + size_t(it));
      char* d = h2d(mine);
      char* r = poisoned(B + size_t(it));
      gpu->sendRecv({{next, d, B + size_t(it)}}, {{prev, r, B + size_t(it)}}, DataType::u8, co);
      ins.push_back(d);
      outs.push_back(r);
      sums.push_back(a);
    }
    CK(cudaStreamSynchronize(st.s));
    for (int it = 0; it < 6; ++it) {
      MP_CHECK(d2h(outs[size_t(it)], B + size_t(it)) == payload(30 + it, prev, rank, 0, B + size_t(it)),
               "interleaved batch %d", it);
      std::vector<char> got = d2h(sums[size_t(it)], cnt * 4);
      const float want = float(size * (size - 1) / 2 + size * it);
      for (size_t i = 0; i < cnt; ++i) {
        float f;
        std::memcpy(&f, got.data() + 4 * i, 4);
        MP_CHECK(f == want, "interleaved allreduce %d: element %zu is %g, not %g", it, i, f, want);
      }
      (void)cudaFree(ins[size_t(it)]);
      (void)cudaFree(outs[size_t(it)]);
      (void)cudaFree(sums[size_t(it)]);
    }
    // A graph: batch round the ring and an allreduce; replays see the buffers' new contents.
    char* d = poisoned(B);
    char* r = poisoned(B);
    char* a = poisoned(cnt * 4);
    gpu->sendRecv({{next, d, B}}, {{prev, r, B}}, DataType::u8, co);  // staging exists first
    CK(cudaStreamSynchronize(st.s));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
    gpu->sendRecv({{next, d, B}}, {{prev, r, B}}, DataType::u8, co);
    gpu->allReduce(a, a, cnt, DataType::f32, RedOpKind::MAX, co);
    CK(cudaStreamEndCapture(st.s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<char> mine = payload(40 + rep, rank, next, 0, B);
      CK(cudaMemcpy(d, mine.data(), B, cudaMemcpyHostToDevice));
      std::vector<float> v(cnt, float(rank * 10 + rep));
      CK(cudaMemcpy(a, v.data(), cnt * 4, cudaMemcpyHostToDevice));
      CK(cudaMemset(r, 0xff, B));
      CK(cudaDeviceSynchronize());
      CK(cudaGraphLaunch(exec, st.s));
      CK(cudaStreamSynchronize(st.s));
      MP_CHECK(d2h(r, B) == payload(40 + rep, prev, rank, 0, B), "graph replay %d: batch", rep);
      std::vector<char> got = d2h(a, 4);
      float f;
      std::memcpy(&f, got.data(), 4);
      MP_CHECK(f == float((size - 1) * 10 + rep), "graph replay %d: allreduce %g", rep, f);
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    (void)cudaFree(d);
    (void)cudaFree(r);
    (void)cudaFree(a);
    gpu->finalize();
  }, std::chrono::seconds(600));
  ASSERT_TRUE(res.ok()) << res.log;
}

// A receive longer than its send: the receiver fails naming the sender and its receive is
// poisoned (never the sender's bytes read as a different message). A peer killed before its send:
// the receiver's call fails within the timeout naming it. (The other ranks leave the comms only
// once the checks are done: an abort anywhere would stop the checked calls first.) The timeout
// (6 s) follows CCLX_TEST_TIME_SCALE (helpers/scale.h).
TEST(GpuSharedP2P, MismatchAndKilledPeerAreNamed) {
  GPU_REQUIRE(1);
  const int n = worldSize();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    const auto timeout = test::expiring(std::chrono::seconds(6));
    auto gpu = gpuComm(rank, size, store, "p2p_bad", timeout);
    Stream st;
    CollOptions co;
    co.stream = st.s;
    if (rank < 2) {
      char* d = h2d(payload(50, rank, 1 - rank, 0, 4096));
      char* r = poisoned(8192);
      const size_t want = rank == 0 ? 8192 : 4096;  // rank 0 expects more than rank 1 sends
      try {
        auto w = gpu->sendRecv({{1 - rank, d, 4096}}, {{1 - rank, r, want}}, DataType::u8, co);
        w->waitBlocking(std::chrono::seconds(60));
        MP_CHECK(rank == 1, "rank 0's receive of the wrong length completed");
      } catch (const Error& e) {
        MP_CHECK(std::string(e.what()).find("rank 1") != std::string::npos ||
                     std::string(e.what()).find("1") != std::string::npos,
                 "the error does not name the sender: %s", e.what());
        std::printf("[p2p] rank %d: %s\n", rank, e.what());
      }
      if (rank == 0)
        for (char ch : d2h(r, want)) MP_CHECK(uint8_t(ch) == 0xff, "the mismatched receive was written");
      store->set("mismatch_checked/" + std::to_string(rank), "1");
    }
    store->wait({"mismatch_checked/0", "mismatch_checked/1"}, std::chrono::seconds(120));
    gpu->abort();
    auto g2 = gpuComm(rank, size, store, "p2p_kill", timeout);
    const int victim = size - 1;
    if (rank == victim) raise(SIGKILL);
    if (rank == 0) {
      char* r = poisoned(1000);
      const auto t0 = std::chrono::steady_clock::now();
      try {
        auto w = g2->recv(r, 1000, DataType::u8, victim, co);
        w->waitBlocking(std::chrono::seconds(60));
        MP_CHECK(false, "a receive from a dead rank completed");
      } catch (const Error& e) {
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MP_CHECK(std::string(e.what()).find(std::to_string(victim)) != std::string::npos,
                 "the error does not name rank %d: %s", victim, e.what());
        MP_CHECK(sec < test::guardSeconds(30), "the failure took %.1f s", sec);
        std::printf("[p2p] rank 0: receive from dead rank %d failed after %.1f s: %s\n", victim, sec,
                    e.what());
      }
      store->set("kill_checked", "1");
    }
    (void)store->get("kill_checked", std::chrono::seconds(120));
    g2->abort();
  }, std::chrono::seconds(300));
  test::echoTagged(res.log, "[p2p]");
  for (int r = 0; r < n - 1; ++r)
    EXPECT_EQ(res.exitCodes[size_t(r)], 0) << "rank " << r << "\n" << res.log;
}

#else

TEST(GpuSharedP2P, BatchesEqualTheHostTwin) { GTEST_SKIP() << "built without CUDA"; }

#endif
