// Several ranks per GPU: all_to_all_v_device (split sizes in device memory, read by the kernel)
// against its host twin (a CPU comm of the same ranks running the shm algorithm on the same
// inputs and host copies of the same split sizes), byte for byte over the whole output buffer:
// the received rows and the rows past them (which must keep their poison). Random split matrices
// with zero rows, all rows to one rank, rows of 1 byte to odd sizes (unaligned vectors), every
// dtype's size, messages of many pipelined chunks (a small staging), buffers larger than the
// call needs, overlapping input and output; back-to-back calls without a sync; interleaved with
// all_to_all_v (one chunk sequence); CUDA-graph replays with split sizes changed between
// replays; split sizes that disagree or exceed the buffers (the call fails naming the ranks, the
// outputs are NaN, nothing hangs).
//
// World size: CCLX_TEST_RANKS (default 4); scripts/gpu_shared.sh runs 2, 3, 4, 5 and 8.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "helpers/gpu_xchg.h"

using namespace cclx;
using namespace gputest;

namespace {

constexpr int kPoison = 0x7B;

/// rows[p][q]: rows rank p sends to rank q (every rank makes the same matrix from `seed`).
using Matrix = std::vector<std::vector<int64_t>>;

Matrix randomRows(int n, uint64_t seed, int hi, double zeroFrac = 0.25) {
  std::mt19937_64 g(seed);
  Matrix m(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n)));
  for (auto& row : m)
    for (auto& x : row) {
      x = int64_t(g() % uint64_t(hi + 1));
      if (double(g() % 1000) < zeroFrac * 1000) x = 0;
    }
  return m;
}

std::vector<int64_t> column(const Matrix& m, int q) {
  std::vector<int64_t> c;
  for (const auto& row : m) c.push_back(row[size_t(q)]);
  return c;
}

size_t total(const std::vector<int64_t>& v) {
  size_t s = 0;
  for (int64_t x : v) s += size_t(x);
  return s;
}

std::vector<char> randomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<char> v(n);
  for (char& c : v) c = char(g());
  return v;
}

/// One rank's buffers of a call: device input, output (poisoned), split sizes; the host twin's.
struct Call {
  std::vector<int64_t> sendRows, recvRows;
  size_t rowElems, sendCap, recvCap, rowBytes;
  DataType t;
  std::vector<char> in;
  DevBuf dIn, dOut, dSendRows, dRecvRows;
  std::vector<char> hOut;

  Call(const Matrix& m, int rank, DataType t_, size_t re, size_t slackIn, size_t slackOut,
       uint64_t seed)
      : sendRows(m[size_t(rank)]), recvRows(column(m, rank)), rowElems(re),
        sendCap(total(sendRows) + slackIn), recvCap(total(recvRows) + slackOut),
        rowBytes(re * dtypeSize(t_)), t(t_), in(randomBytes(sendCap * rowBytes, seed * 977 + rank)),
        dIn(sendCap * rowBytes), dOut(recvCap * rowBytes), dSendRows(sendRows.size() * 8),
        dRecvRows(recvRows.size() * 8), hOut(recvCap * rowBytes, char(kPoison)) {
    CK(cudaMemcpy(dIn.base, in.data(), in.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dOut.base, kPoison, dOut.total));
    setRows(sendRows, recvRows);
  }
  void setRows(const std::vector<int64_t>& s, const std::vector<int64_t>& r) {
    CK(cudaMemcpy(dSendRows.base, s.data(), s.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dRecvRows.base, r.data(), r.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize());
  }
  void gpu(Comm& c, cudaStream_t s) {
    CollOptions co;
    co.stream = s;
    c.allToAllVDevice(dIn.base, dOut.base, reinterpret_cast<const int64_t*>(dSendRows.base),
                      reinterpret_cast<const int64_t*>(dRecvRows.base), rowElems, t, sendCap,
                      recvCap, co);
  }
  void twin(Comm& c) {
    c.allToAllVDevice(in.data(), hOut.data(), sendRows.data(), recvRows.data(), rowElems, t,
                      sendCap, recvCap);
  }
  /// The whole device output (and the guard bytes after it) against the twin's.
  void expectTwin(const std::string& what) {
    const std::vector<char> got = d2h(dOut.base, dOut.total);
    for (size_t i = 0; i < hOut.size(); ++i)
      MP_CHECK(got[i] == hOut[i], "%s: byte %zu of %zu differs (got %02x, twin %02x)", what.c_str(),
               i, hOut.size(), unsigned(uint8_t(got[i])), unsigned(uint8_t(hOut[i])));
    for (size_t i = hOut.size(); i < got.size(); ++i)
      MP_CHECK(uint8_t(got[i]) == kPoison, "%s: wrote past the output (byte %zu)", what.c_str(), i);
  }
};

struct Shape {
  DataType t;
  size_t rowElems;
  int hi;  // largest split
};

const Shape kShapes[] = {
    {DataType::u8, 1, 9},        {DataType::u8, 3, 7},       {DataType::f16, 5, 6},
    {DataType::bf16, 4096, 3},   {DataType::f32, 7, 11},     {DataType::f32, 1024, 40},
    {DataType::i64, 33, 5},      {DataType::f64, 2, 200},    {DataType::fp8_e4m3, 129, 8},
    {DataType::i32, 100003, 2},  // about 1.2 MiB per row pair: many chunks per block
};

void runShapes(TwinRank& r, uint64_t seed0) {
  uint64_t seed = seed0;
  for (const Shape& sh : kShapes)
    for (int variant = 0; variant < 4; ++variant) {
      ++seed;
      Matrix m = randomRows(r.size, seed, sh.hi);
      if (variant == 1) m = Matrix(size_t(r.size), std::vector<int64_t>(size_t(r.size), 0));
      if (variant == 2)  // every rank sends to rank size - 1 only
        for (int p = 0; p < r.size; ++p)
          for (int q = 0; q < r.size; ++q) m[size_t(p)][size_t(q)] = q == r.size - 1 ? 1 + p : 0;
      const size_t slack = variant == 3 ? 3 : 0;
      Call c(m, r.rank, sh.t, sh.rowElems, slack, slack, seed);
      c.gpu(*r.gpu, r.st.s);
      c.twin(*r.twin);
      CK(cudaStreamSynchronize(r.st.s));
      c.expectTwin(std::string(dtypeName(sh.t)) + " x" + std::to_string(sh.rowElems) +
                   " variant " + std::to_string(variant));
    }
}

}  // namespace

TEST(GpuA2avDevice, EqualsHostTwin) {
  GPU_REQUIRE(1);
  runTwinRanksWith(sharedWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    return xchgtest::gpuComm(rank, size, std::move(store), "a2avdev");
  }, "a2avdev_twin", [](TwinRank& r) {
    // The peer-memory kernel runs it (no NCCL where ranks share a GPU).
    CollArgs a;
    a.type = CollType::AllToAllVDevice;
    a.dtype = DataType::f32;
    a.rows.rowElems = 1;
    MP_CHECK(xchgtest::backendOf(*r.gpu).select(a) == Algo::Pipelined, "not the pipelined kernel");
    runShapes(r, 100);
  });
}

// A 2 MiB staging and 4 blocks: every message of more than a few KiB takes many chunks.
TEST(GpuA2avDevice, SmallStagingManyChunksEqualsHostTwin) {
  GPU_REQUIRE(1);
  runTwinRanksWith(sharedWorldSize(), [](int rank, int size, std::shared_ptr<Store> store) {
    return xchgtest::gpuComm(rank, size, std::move(store), "a2avdev_small", true);
  }, "a2avdev_twin", [](TwinRank& r) { runShapes(r, 200); });
}

// Input and output overlapping (the same buffer): the backend stages the input first.
TEST(GpuA2avDevice, InPlaceEqualsHostTwin) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "a2avdev_inplace", "a2avdev_twin", [](TwinRank& r) {
    const Matrix m = randomRows(r.size, 300, 6);
    Call c(m, r.rank, DataType::f32, 9, 0, 0, 300);
    const size_t cap = std::max(c.sendCap, c.recvCap) * c.rowBytes;
    DevBuf buf(cap);
    CK(cudaMemset(buf.base, kPoison, buf.total));
    CK(cudaMemcpy(buf.base, c.in.data(), c.in.size(), cudaMemcpyHostToDevice));
    CollOptions co;
    co.stream = r.st.s;
    r.gpu->allToAllVDevice(buf.base, buf.base, reinterpret_cast<const int64_t*>(c.dSendRows.base),
                           reinterpret_cast<const int64_t*>(c.dRecvRows.base), c.rowElems, c.t,
                           cap / c.rowBytes, cap / c.rowBytes, co);
    c.twin(*r.twin);
    CK(cudaStreamSynchronize(r.st.s));
    const std::vector<char> got = d2h(buf.base, c.hOut.size());
    MP_CHECK(got == c.hOut, "rank %d: in-place result differs from the twin", r.rank);
  });
}

// Calls back to back on one stream without a sync, split sizes different in each, interleaved
// with all_to_all_v (both continue one chunk sequence per pair).
TEST(GpuA2avDevice, BackToBackInterleavedWithAllToAllV) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "a2avdev_b2b", "a2avdev_twin", [](TwinRank& r) {
    std::vector<std::unique_ptr<Call>> calls;
    std::vector<std::unique_ptr<DevBuf>> vIn, vOut;
    std::vector<std::vector<char>> vWant;
    for (int i = 0; i < 12; ++i) {
      const uint64_t seed = 400 + uint64_t(i);
      calls.push_back(std::make_unique<Call>(randomRows(r.size, seed, 2 + i % 7), r.rank,
                                             i % 2 ? DataType::bf16 : DataType::u8, 1 + 37 * (i % 3),
                                             0, 1, seed));
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i]->gpu(*r.gpu, r.st.s);
      // all_to_all_v in elements between two device calls: rank p sends 5 + p + q to rank q.
      std::vector<size_t> counts;
      size_t elems = 0;
      for (int p = 0; p < r.size; ++p) {
        counts.push_back(size_t(5 + p + r.rank));
        elems += counts.back();
      }
      const std::vector<char> in = randomBytes(elems * 4, 77 + 1000 * i + uint64_t(r.rank));
      vIn.push_back(std::make_unique<DevBuf>(in.size()));
      vOut.push_back(std::make_unique<DevBuf>(in.size()));
      CK(cudaMemcpy(vIn.back()->base, in.data(), in.size(), cudaMemcpyHostToDevice));
      CollOptions co;
      co.stream = r.st.s;
      r.gpu->allToAllV(vIn.back()->base, counts, vOut.back()->base, counts, DataType::f32, co);
      std::vector<char> want(in.size());
      r.twin->allToAllV(in.data(), counts, want.data(), counts, DataType::f32);
      vWant.push_back(std::move(want));
    }
    for (auto& c : calls) c->twin(*r.twin);
    CK(cudaStreamSynchronize(r.st.s));
    for (size_t i = 0; i < calls.size(); ++i) {
      calls[i]->expectTwin("back-to-back call " + std::to_string(i));
      MP_CHECK(d2h(vOut[i]->base, vWant[i].size()) == vWant[i], "all_to_all_v %zu differs", i);
    }
  });
}

// One capture, replays with new split sizes and new inputs copied in between (the sizes live in
// the device buffers the graph reads).
TEST(GpuA2avDevice, GraphReplaysWithChangingSplitSizes) {
  GPU_REQUIRE(1);
  runTwinRanks(sharedWorldSize(), "a2avdev_graph", "a2avdev_twin", [](TwinRank& r) {
    const int n = r.size;
    // Capacities for the largest matrix of the replays (splits up to 9 rows).
    Matrix big(static_cast<size_t>(n), std::vector<int64_t>(static_cast<size_t>(n), 9));
    Call c(big, r.rank, DataType::bf16, 96, 0, 0, 500);
    Graph g(r.st.s, [&] { c.gpu(*r.gpu, r.st.s); });
    for (int rep = 0; rep < 6; ++rep) {
      const uint64_t seed = 600 + uint64_t(rep);
      Matrix m = rep == 2 ? Matrix(size_t(n), std::vector<int64_t>(size_t(n), 0))
                          : randomRows(n, seed, 9);
      c.sendRows = m[size_t(r.rank)];
      c.recvRows = column(m, r.rank);
      c.in = randomBytes(c.sendCap * c.rowBytes, seed * 31 + r.rank);
      CK(cudaMemcpy(c.dIn.base, c.in.data(), c.in.size(), cudaMemcpyHostToDevice));
      CK(cudaMemset(c.dOut.base, kPoison, c.dOut.total));
      c.setRows(c.sendRows, c.recvRows);
      std::fill(c.hOut.begin(), c.hOut.end(), char(kPoison));
      g.launch();
      c.twin(*r.twin);
      CK(cudaStreamSynchronize(r.st.s));
      c.expectTwin("replay " + std::to_string(rep));
    }
  });
}

namespace {

/// Every rank sends 2 rows to every rank, inputs holding one row more; `spoil(rank, send, recv)`
/// changes some ranks' split sizes so that the call cannot run. The call fails on every rank
/// with a message holding one of `needles` (the detecting rank's own, or the abort word's); the
/// output of rank `detector` is NaN (all-ones bytes), every other rank's is exact or NaN (a rank
/// whose messages were all complete before the abort may finish its copy).
template <class Spoil>
void expectFailure(const char* name, Spoil&& spoil, int detector, std::vector<std::string> needles) {
  const int n = sharedWorldSize();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = xchgtest::gpuComm(rank, size, store, name, false, std::chrono::seconds(10));
    Stream st;
    const Matrix m(static_cast<size_t>(size), std::vector<int64_t>(static_cast<size_t>(size), 2));
    constexpr uint64_t kSeed = 700;
    Call c(m, rank, DataType::f32, 3, 1, 0, kSeed);
    std::vector<int64_t> s = c.sendRows, rr = c.recvRows;
    spoil(rank, s, rr);
    c.setRows(s, rr);
    // What an exact output would be: rank p's rows for this rank, as p's spoiled sizes place them.
    std::vector<char> exact;
    bool canBeExact = true;
    for (int p = 0; p < size; ++p) {
      std::vector<int64_t> sp = m[size_t(p)], rp = column(m, p);
      spoil(p, sp, rp);
      size_t off = 0;
      for (int q = 0; q < rank; ++q) off += size_t(sp[size_t(q)]);
      canBeExact = canBeExact && sp[size_t(rank)] == rr[size_t(p)] && sp[size_t(rank)] >= 0;
      if (!canBeExact) continue;
      const std::vector<char> in = randomBytes(c.sendCap * c.rowBytes, kSeed * 977 + p);
      exact.insert(exact.end(), in.begin() + off * c.rowBytes,
                   in.begin() + (off + size_t(sp[size_t(rank)])) * c.rowBytes);
    }
    bool failed = false;
    try {
      c.gpu(*gpu, st.s);
      CK(cudaStreamSynchronize(st.s));
      gpu->barrier()->waitBlocking(std::chrono::seconds(60));
    } catch (const Error& e) {
      failed = true;
      bool named = false;
      for (const std::string& k : needles)
        named = named || std::string(e.what()).find(k) != std::string::npos;
      MP_CHECK(named, "rank %d: unclear message: %s", rank, e.what());
    }
    MP_CHECK(failed, "rank %d: the call did not fail", rank);
    CK(cudaDeviceSynchronize());
    const std::vector<char> got = d2h(c.dOut.base, c.recvCap * c.rowBytes);
    bool nan = true;
    for (char x : got) nan = nan && uint8_t(x) == 0xff;
    if (rank == detector) MP_CHECK(nan, "rank %d: the output is not NaN", rank);
    else MP_CHECK(nan || (canBeExact && got == exact), "rank %d: output neither exact nor NaN", rank);
  }, std::chrono::seconds(300));
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

// Rank 1 sends rank 0 one row more than rank 0 expects (its input holds it): rank 0 names rank 1.
TEST(GpuA2avDevice, SplitSizesThatDisagreeFailClearly) {
  GPU_REQUIRE(1);
  expectFailure("a2avdev_mismatch", [](int rank, std::vector<int64_t>& s, std::vector<int64_t>&) {
    if (rank == 1) s[0] += 1;
  }, 0, {"all-to-all-v counts disagree"});
}

// Rank 0's output split sizes sum beyond its output's rows: every rank fails naming rank 0.
TEST(GpuA2avDevice, SplitSizesBeyondTheBuffersFailClearly) {
  GPU_REQUIRE(1);
  expectFailure("a2avdev_capacity", [](int rank, std::vector<int64_t>&, std::vector<int64_t>& r) {
    if (rank == 0) r.back() += 1;
  }, 0, {"split sizes of all_to_all_v_device"});
}

// A negative split size is refused the same way (rank 0 names itself).
TEST(GpuA2avDevice, NegativeSplitSizeFailsClearly) {
  GPU_REQUIRE(1);
  expectFailure("a2avdev_negative", [](int rank, std::vector<int64_t>& s, std::vector<int64_t>&) {
    if (rank == 0) s.back() = -1;
  }, 0, {"split sizes of all_to_all_v_device"});
}

#else

TEST(GpuA2avDevice, EqualsHostTwin) { GTEST_SKIP() << "built without CUDA"; }

#endif
