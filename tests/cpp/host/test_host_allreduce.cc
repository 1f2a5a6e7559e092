// Multi-process tests of the host allreduce (flat, tree and the data-as-flag twin) through the
// public Comm API.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "core/settings/config.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"
#include "host/shm.h"

using namespace cclx;
using namespace hosttest;
using cclx::test::makeCpuComm;
using cclx::test::runRanks;

namespace {

// Small staging slots make every size above a few KiB go through several chunks.
void useSmallSlots() {
  setenv("CCLX_SHM_CHUNK_BYTES", "4096", 1);
  reloadConfig();
}

CollOptions algo(const char* name) {
  CollOptions o;
  o.hints["algo"] = name;
  return o;
}

// Runs one allreduce of `count` elements and checks it against the reference.
void checkAllReduce(Comm& comm, DataType t, ReduceOp op, size_t count, bool inPlace,
                    const CollOptions& o, uint64_t seed) {
  const size_t es = esize(t);
  std::vector<char> send(count * es + 1), recv(count * es + 1, char(kPoison));
  fillInput(send.data(), t, op.kind, seed, comm.rank(), count);
  void* out = inPlace ? send.data() : recv.data();
  comm.allReduce(send.data(), out, count, t, op, o);
  std::string err = checkReduced(t, op, seed, comm.size(), out, count);
  MP_CHECK(err.empty(), "%s %s count=%zu inplace=%d algo=%s: %s", dtypeName(t), opName(op.kind),
           count, int(inPlace), o.hints.count("algo") ? o.hints.at("algo").c_str() : "auto",
           err.c_str());
  if (!inPlace) MP_CHECK(uint8_t(recv[count * es]) == kPoison, "wrote past the end");
}

}  // namespace

TEST(HostAllReduce, EveryDtypeAndOpFlatTreeAndLamport) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    useSmallSlots();
    auto comm = makeCpuComm(rank, size, store, testOpts());
    uint64_t seed = 100;
    for (DataType t : allDtypes())
      for (ReduceOp op : opsFor(t))
        for (size_t count : {1ul, 1023ul})
          for (bool inPlace : {false, true})
            for (const char* a : {"flat", "tree", "lamport"})
              checkAllReduce(*comm, t, op, count, inPlace, algo(a), ++seed);
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostAllReduce, SizesFromZeroToOneMiB) {
  for (int n : {2, 4}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      auto comm = makeCpuComm(rank, size, store, testOpts());
      uint64_t seed = 7;
      // 4 KiB of f32 is flat, 1 MiB is tree (defaults).
      MP_CHECK(comm->selectAllReduceAlgo(1024, DataType::f32, RedOpKind::SUM) == "flat");
      MP_CHECK(comm->selectAllReduceAlgo(262144, DataType::f32, RedOpKind::SUM) == "tree");
      MP_CHECK(comm->selectAllReduceAlgo(262144, DataType::f32, RedOpKind::SUM, algo("flat")) == "flat");
      MP_CHECK(comm->selectAllReduceAlgo(4, DataType::f32, RedOpKind::SUM, algo("tree")) == "tree");
      for (size_t count : {1ul, 1023ul, 1024ul, 4099ul, 262144ul})
        for (DataType t : {DataType::f32, DataType::bf16, DataType::i32})
          for (bool inPlace : {false, true})
            checkAllReduce(*comm, t, RedOpKind::SUM, count, inPlace, {}, ++seed);
      // Size 0 writes nothing and leaves the ranks in step.
      std::vector<float> poison(4, -7.0f);
      comm->allReduce(poison.data(), poison.data() + 2, 0, DataType::f32, RedOpKind::SUM);
      MP_CHECK(poison[2] == -7.0f && poison[3] == -7.0f, "size 0 wrote");
      checkAllReduce(*comm, DataType::f32, RedOpKind::MAX, 5, false, {}, ++seed);
      comm->finalize();
    });
    ASSERT_TRUE(res.ok()) << "ranks " << n << "\n" << res.log;
  }
}

TEST(HostAllReduce, SixtyFourMiBFloat32FourRanks) {
  auto res = runRanks(4, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, testOpts());
    const size_t count = 16u << 20;  // 64 MiB of f32
    std::vector<float> send(count), recv(count, -1.0f);
    fillInput(send.data(), DataType::f32, RedOpKind::SUM, 4242, rank, count);
    comm->barrier();
    auto t0 = std::chrono::steady_clock::now();
    comm->allReduce(send.data(), recv.data(), count, DataType::f32, RedOpKind::SUM);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 0) std::printf("64 MiB f32 allreduce, 4 ranks: %.1f ms\n", ms);
    // Every rank checks its quarter (the result is identical everywhere: checked below).
    Range mine = splitRange(count, size, rank);
    std::string err = checkReduced(DataType::f32, RedOpKind::SUM, 4242, size, recv.data() + mine.begin,
                                   mine.size(), mine.begin);
    MP_CHECK(err.empty(), "%s", err.c_str());
    // Identical bits on every rank: compare a checksum through an allreduce of the bit pattern.
    uint64_t h = 0;
    for (size_t i = 0; i < count; ++i) {
      uint32_t b;
      std::memcpy(&b, &recv[i], 4);
      h = mix(h ^ b);
    }
    uint64_t mn = h, mx = h;
    comm->allReduce(&mn, &mn, 1, DataType::u64, RedOpKind::MIN);
    comm->allReduce(&mx, &mx, 1, DataType::u64, RedOpKind::MAX);
    MP_CHECK(mn == h && mx == h, "results differ across ranks");
    comm->finalize();
  }, std::chrono::seconds(240));
  ASSERT_TRUE(res.ok()) << res.log;
  std::printf("%s", res.log.c_str());
}

TEST(HostAllReduce, FlatAndTreeGiveIdenticalBits) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, testOpts());
    const size_t count = 100003;
    for (DataType t : {DataType::f32, DataType::bf16, DataType::f16, DataType::f64}) {
      for (ReduceOp op : {ReduceOp(RedOpKind::SUM), ReduceOp(RedOpKind::AVG), ReduceOp::premulSum(0.3)}) {
        const size_t es = esize(t);
        std::vector<char> send(count * es), a(count * es, char(kPoison)), b(count * es, char(kPoison));
        fillInput(send.data(), t, op.kind, 99, rank, count);
        comm->allReduce(send.data(), a.data(), count, t, op, algo("flat"));
        comm->allReduce(send.data(), b.data(), count, t, op, algo("tree"));
        MP_CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0, "flat and tree differ: %s %s",
                 dtypeName(t), opName(op.kind));
        std::string err = checkReduced(t, op, 99, size, a.data(), count);
        MP_CHECK(err.empty(), "%s", err.c_str());
      }
    }
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The data-as-flag allreduce (the twin of the GPU Lamport kernel): same bits as flat for every
// float dtype and op, odd counts, unaligned buffers and in place; all-ones NaN inputs come out as
// NaN; integers and messages larger than one inbox run the tree.
TEST(HostAllReduce, LamportMatchesFlatBits) {
  for (int n : {2, 5}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      auto comm = makeCpuComm(rank, size, store, testOpts());
      MP_CHECK(comm->selectAllReduceAlgo(1024, DataType::f32, RedOpKind::SUM, algo("lamport")) == "lamport");
      MP_CHECK(comm->selectAllReduceAlgo(1024, DataType::i32, RedOpKind::SUM, algo("lamport")) == "tree");
      MP_CHECK(comm->selectAllReduceAlgo(1 << 20, DataType::f32, RedOpKind::SUM, algo("lamport")) == "tree");
      uint64_t seed = 500;
      for (DataType t : {DataType::f32, DataType::f64, DataType::f16, DataType::bf16}) {
        const size_t es = esize(t);
        for (ReduceOp op : opsFor(t)) {
          for (size_t count : {1ul, 3ul, 4099ul, (256ul << 10) / es}) {
            for (int layout = 0; layout < 3; ++layout) {  // out of place, unaligned, in place
              const size_t off = layout == 1 ? es : 0;
              std::vector<char> send(count * es + 16), a(count * es + 16, char(kPoison)),
                  b(count * es + 16, char(kPoison));
              fillInput(send.data() + off, t, op.kind, ++seed, rank, count);
              comm->allReduce(send.data() + off, a.data() + off, count, t, op, algo("flat"));
              void* out = layout == 2 ? send.data() : b.data() + off;
              comm->allReduce(send.data() + off, out, count, t, op, algo("lamport"));
              MP_CHECK(std::memcmp(a.data() + off, out, count * es) == 0,
                       "lamport and flat differ: %s %s count=%zu layout=%d", dtypeName(t),
                       opName(op.kind), count, layout);
              if (layout != 2) MP_CHECK(uint8_t(b[off + count * es]) == kPoison, "wrote past the end");
            }
          }
        }
        // All-ones elements (NaNs) on one rank: NaN out there, flat's bits everywhere else.
        const size_t count = 1001;
        std::vector<char> send(count * es), a(count * es), b(count * es);
        fillInput(send.data(), t, RedOpKind::SUM, ++seed, rank, count);
        for (size_t i = size_t(rank); i < count; i += 97) std::memset(send.data() + i * es, 0xFF, es);
        comm->allReduce(send.data(), a.data(), count, t, RedOpKind::SUM, algo("flat"));
        comm->allReduce(send.data(), b.data(), count, t, RedOpKind::SUM, algo("lamport"));
        for (size_t i = 0; i < count; ++i) {
          const bool nan = i % 97 < size_t(size);
          double v = t == DataType::f32   ? double(reinterpret_cast<float*>(b.data())[i])
                     : t == DataType::f64 ? reinterpret_cast<double*>(b.data())[i]
                     : t == DataType::f16 ? decodeF16(reinterpret_cast<uint16_t*>(b.data())[i])
                                          : decodeBf16(reinterpret_cast<uint16_t*>(b.data())[i]);
          if (nan) MP_CHECK(std::isnan(v), "%s element %zu: NaN expected", dtypeName(t), i);
          else MP_CHECK(std::memcmp(a.data() + i * es, b.data() + i * es, es) == 0,
                        "%s element %zu differs from flat", dtypeName(t), i);
        }
      }
      // Back to back without barriers, mixed with the other algorithms (inbox parity and reuse).
      for (int it = 0; it < 3000; ++it) {
        const size_t count = 1 + size_t(it * 37) % 5000;
        const char* a = it % 5 == 0 ? "tree" : it % 5 == 3 ? "flat" : "lamport";
        checkAllReduce(*comm, it % 2 ? DataType::f32 : DataType::bf16, RedOpKind::SUM, count, it % 3 == 0,
                       algo(a), uint64_t(9000 + it));
      }
      comm->finalize();
    }, std::chrono::seconds(240));
    ASSERT_TRUE(res.ok()) << "ranks " << n << "\n" << res.log;
  }
}

TEST(HostAllReduce, TenThousandBackToBackWithoutBarriers) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    useSmallSlots();
    auto comm = makeCpuComm(rank, size, store, testOpts());
    const size_t count = 67;
    std::vector<float> in[2] = {std::vector<float>(count), std::vector<float>(count)};
    std::vector<float> out[2] = {std::vector<float>(count), std::vector<float>(count)};
    for (int it = 0; it < 10000; ++it) {
      auto& s = in[it & 1];
      auto& r = out[it & 1];
      fillInput(s.data(), DataType::f32, RedOpKind::SUM, uint64_t(it), rank, count);
      std::fill(r.begin(), r.end(), -1e30f);
      // Every 7th call uses tree (two steps) so the slot parity keeps shifting.
      comm->allReduce(s.data(), r.data(), count, DataType::f32, RedOpKind::SUM,
                      it % 7 == 0 ? algo("tree") : CollOptions{});
      std::string err = checkReduced(DataType::f32, RedOpKind::SUM, uint64_t(it), size, r.data(), count);
      MP_CHECK(err.empty(), "iteration %d: %s", it, err.c_str());
    }
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostAllReduce, MissingRankTimesOutNamingIt) {
  for (const char* a : {"auto", "lamport"}) {  // step waits, data-as-flag polls
    auto res = runRanks(3, [a](int rank, int size, std::shared_ptr<Store> store) {
      Options opts;
      opts.timeout = std::chrono::milliseconds(3000);
      auto comm = makeCpuComm(rank, size, store, opts);
      std::vector<float> x(1000, 1.0f);
      comm->allReduce(x.data(), x.data(), x.size(), DataType::f32, RedOpKind::SUM);  // all present
      if (rank == 2) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        return;  // never joins the second allreduce
      }
      CollOptions o = algo(a);
      o.timeout = std::chrono::milliseconds(400);
      auto t0 = std::chrono::steady_clock::now();
      try {
        comm->allReduce(x.data(), x.data(), x.size(), DataType::f32, RedOpKind::SUM, o);
        MP_CHECK(false, "allreduce without rank 2 returned");
      } catch (const Error& e) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find("[2]") != std::string::npos, "message: %s", e.what());
        MP_CHECK(s >= 0.35 && s < 2.0, "timed out after %.2f s", s);
      }
      try {
        comm->allReduce(x.data(), x.data(), x.size(), DataType::f32, RedOpKind::SUM, o);
        MP_CHECK(false, "comm still usable after a timeout");
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidUsage, "code %d: %s", int(e.code()), e.what());
      }
    });
    ASSERT_TRUE(res.ok()) << a << "\n" << res.log;
  }
}
