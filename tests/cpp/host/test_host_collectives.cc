// Multi-process tests of the host collectives other than allreduce, through the public Comm API.
// Staging slots are 4 KiB here so that odd counts run through several chunks.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "helpers/host_rounds.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"

using namespace cclx;
using namespace hosttest;
using cclx::test::makeCpuComm;
using cclx::test::runRanks;

TEST(HostCollectives, ReduceEveryDtypeAndOp) {
  auto res = runSmallSlot(3, [](Comm& comm, int rank, int size) {
    uint64_t seed = 500;
    for (DataType t : allDtypes())
      for (ReduceOp op : opsFor(t))
        for (int root : {0, 2})
          for (bool inPlace : {false, true}) {
            const size_t count = 1023, es = esize(t);
            Buf send(count * es), recv = poisoned(count * es);
            fillInput(send.data(), t, op.kind, ++seed, rank, count);
            void* out = inPlace ? send.data() : recv.data();
            comm.reduce(send.data(), out, count, t, op, root);
            if (rank == root) {
              std::string err = checkReduced(t, op, seed, size, out, count);
              MP_CHECK(err.empty(), "%s %s root %d: %s", dtypeName(t), opName(op.kind), root, err.c_str());
            } else if (!inPlace) {
              MP_CHECK(allPoison(recv.data(), recv.size()), "non-root output written");
            }
          }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, ReduceScatterSingleAndList) {
  auto res = runSmallSlot(4, [](Comm& comm, int rank, int size) {
    uint64_t seed = 900;
    for (DataType t : allDtypes())
      for (ReduceOp op : opsFor(t))
        for (size_t count : {1ul, 1023ul})
          for (int mode = 0; mode < 3; ++mode) {  // 0 single, 1 list, 2 in place
            const size_t es = esize(t), n = size_t(size);
            // Block b of every rank's input is element range [b*count, (b+1)*count) of the
            // reference, so the expected output of rank r is the reference at r*count.
            Buf send(n * count * es), recv = poisoned(count * es + 1);
            fillInput(send.data(), t, op.kind, ++seed, rank, n * count);
            void* out = reduceScatterForm(comm, mode, send, recv, count, t, op);
            std::string err = checkReduced(t, op, seed, size, out, count, size_t(rank) * count);
            MP_CHECK(err.empty(), "%s %s count %zu mode %d: %s", dtypeName(t), opName(op.kind), count,
                     mode, err.c_str());
            MP_CHECK(uint8_t(recv[count * es]) == kPoison, "wrote past the end");
          }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, BroadcastAllGatherAllToAllEveryDtype) {
  auto res = runSmallSlot(3, [](Comm& comm, int rank, int size) {
    uint64_t seed = 1300;
    for (DataType t : allDtypes())
      for (size_t count : {1ul, 1023ul, 4099ul})
        for (bool inPlace : {false, true}) {
          const size_t es = esize(t), bytes = count * es;
          // Broadcast from the last rank.
          {
            const int root = size - 1;
            Buf send(bytes), recv = poisoned(bytes);
            fillBytes(send.data(), bytes, ++seed, root);
            void* out = inPlace ? send.data() : recv.data();
            if (inPlace && rank != root) std::fill(send.begin(), send.end(), char(kPoison));
            comm.broadcast(send.data(), out, count, t, root);
            MP_CHECK(bytesMatch(out, bytes, seed, root), "broadcast %s count %zu", dtypeName(t), count);
          }
          allGatherRound(comm, t, count, inPlace, seed);
          allToAllRound(comm, t, count, inPlace, seed);
        }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, AllToAllVUnevenCounts) {
  auto res = runSmallSlot(4, [](Comm& comm, int rank, int size) {
    const size_t n = size_t(size);
    // count(src -> dst): uneven, some zero, some larger than a slot.
    auto cnt = [](int src, int dst, int round) -> size_t {
      size_t v = size_t((src * 7 + dst * 3 + round) % 5);
      return v == 0 ? 0 : v * v * 173 + size_t(src);
    };
    uint64_t seed = 2000;
    for (int round = 0; round < 4; ++round)
      for (DataType t : {DataType::f32, DataType::u8, DataType::fp8_e5m2, DataType::f64})
        for (bool inPlace : {false, true}) allToAllVRound(comm, t, inPlace, round, seed, cnt);
    // Mismatched counts fail on every rank with cclxInvalidArgument and write nothing.
    std::vector<size_t> sc(n, 2), rc(n, 2);
    if (rank == 1) sc[2] = 3;
    Buf send(3 * n * 4, 1), recv = poisoned(2 * n * 4);
    try {
      comm.allToAllV(send.data(), sc, recv.data(), rc, DataType::f32);
      MP_CHECK(false, "mismatched counts accepted");
    } catch (const Error& e) {
      MP_CHECK(e.code() == cclxInvalidArgument, "code %d: %s", int(e.code()), e.what());
    }
    MP_CHECK(allPoison(recv.data(), recv.size()), "mismatched alltoallv wrote");
    comm.barrier();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, SendRecvPairs) {
  auto res = runSmallSlot(4, [](Comm& comm, int rank, int size) {
    const int peer = rank ^ 1;  // pairs 0-1 and 2-3 run independently
    uint64_t seed = 3000;
    for (DataType t : {DataType::f32, DataType::bf16, DataType::fp8_e4m3, DataType::i64})
      for (size_t count : {0ul, 1ul, 1023ul, 4099ul, 70001ul}) {
        const size_t bytes = count * esize(t);
        Buf mine(bytes), theirs = poisoned(bytes + 1);
        ++seed;
        fillBytes(mine.data(), bytes, seed, rank);
        // Sends larger than two channel slots wait for the receiver: order the pair's calls.
        if (rank % 2 == 0) {
          comm.send(mine.data(), count, t, peer);
          comm.recv(theirs.data(), count, t, peer);
        } else {
          comm.recv(theirs.data(), count, t, peer);
          comm.send(mine.data(), count, t, peer);
        }
        MP_CHECK(bytesMatch(theirs.data(), bytes, seed, peer), "%s count %zu", dtypeName(t), count);
        MP_CHECK(uint8_t(theirs[bytes]) == kPoison, "wrote past the end");
      }
    // Several small messages in flight before the receiver starts.
    if (rank % 2 == 0) {
      for (int k = 0; k < 2; ++k) comm.send(&k, 1, DataType::i32, peer);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      for (int k = 0; k < 2; ++k) {
        int v = -1;
        comm.recv(&v, 1, DataType::i32, peer);
        MP_CHECK(v == k, "message %d arrived as %d", k, v);
      }
    }
    comm.barrier();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, BarrierWaitsForTheLastRank) {
  auto res = runRanks(5, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, testOpts());
    comm->barrier();
    auto t0 = std::chrono::steady_clock::now();
    if (rank == 3) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm->barrier();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    MP_CHECK(ms >= 250, "left the barrier after %.1f ms", ms);
    for (int i = 0; i < 200; ++i) comm->barrier();
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, EightRanksOnTwoCores) {
  auto res = runRanks(8, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, testOpts());
    uint64_t seed = 4000;
    auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < 300; ++it) {
      const size_t count = it % 3 == 0 ? 20000 : 37;
      std::vector<float> in(count), out(count, -1.0f);
      fillInput(in.data(), DataType::f32, RedOpKind::SUM, ++seed, rank, count);
      comm->allReduce(in.data(), out.data(), count, DataType::f32, RedOpKind::SUM);
      std::string err = checkReduced(DataType::f32, RedOpKind::SUM, seed, size, out.data(), count);
      MP_CHECK(err.empty(), "iteration %d: %s", it, err.c_str());
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 0) std::printf("300 allreduces on 8 ranks: %.2f s\n", s);
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
  std::printf("%s", res.log.c_str());
}

TEST(HostCollectives, UseAfterFinalizeAndPeerAbort) {
  auto res = runRanks(2, [](int rank, int size, std::shared_ptr<Store> store) {
    Options opts;
    opts.timeout = std::chrono::milliseconds(20000);
    auto comm = makeCpuComm(rank, size, store, opts);
    comm->barrier();
    if (rank == 1) {
      comm->abort();
      try {
        comm->barrier();
        MP_CHECK(false, "barrier after abort accepted");
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidUsage, "code %d", int(e.code()));
      }
      return;
    }
    // The peer aborted: fail fast, well before the 20 s timeout.
    auto t0 = std::chrono::steady_clock::now();
    try {
      comm->barrier();
      MP_CHECK(false, "barrier with an aborted peer returned");
    } catch (const Error& e) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      MP_CHECK(e.code() == cclxRemoteError, "code %d: %s", int(e.code()), e.what());
      MP_CHECK(s < 5, "took %.1f s", s);
    }
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(HostCollectives, SingleRankComm) {
  auto res = runRanks(1, [](int rank, int size, std::shared_ptr<Store> store) {
    auto comm = makeCpuComm(rank, size, store, testOpts());
    std::vector<float> in(1023), out(1023, -1.0f);
    fillInput(in.data(), DataType::f32, RedOpKind::AVG, 5, 0, in.size());
    for (const char* a : {"flat", "tree"}) {
      CollOptions o;
      o.hints["algo"] = a;
      comm->allReduce(in.data(), out.data(), in.size(), DataType::f32, RedOpKind::AVG, o);
      MP_CHECK(std::memcmp(in.data(), out.data(), in.size() * 4) == 0, "%s: 1-rank AVG is not the input", a);
    }
    std::vector<size_t> c{1023};
    std::fill(out.begin(), out.end(), -1.0f);
    comm->allToAllV(in.data(), c, out.data(), c, DataType::f32);
    MP_CHECK(std::memcmp(in.data(), out.data(), in.size() * 4) == 0, "1-rank alltoallv");
    comm->barrier();
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}
