// Grouped point to point (Comm::sendRecv) on the host transport at world sizes 2..8, and the
// collectives Comm lowers onto it (scatter, gather, gatherSingle, allGatherV, allToAllList) plus
// reduceScatterV. Staging slots (and so the point-to-point channel pieces) are 4 KiB, so that
// messages span many pieces and a sender fills both of a pair's channel slots long before the
// receiver gets to it: a group that blocked on one pair would deadlock here.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "helpers/host_rounds.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"

using namespace cclx;
using namespace hosttest;
using cclx::test::makeCpuComm;
using cclx::test::runRanks;

namespace {

// Elements of the k-th message from `src` to `dst` in round `seed`: zero, one piece, many pieces.
size_t msgCount(uint64_t seed, int src, int dst, int k, DataType t) {
  const size_t es = esize(t);
  switch (rnd(seed, src * 131 + dst, size_t(k)) % 6) {
    case 0: return 0;
    case 1: return 1;
    case 2: return 4096 / es + 3;                 // just over one piece
    case 3: return (rnd(seed, src, k) % 2000) + 7;
    case 4: return 3 * 4096 / es + 1;             // more than both channel slots
    default: return 70001 / es;                   // ~17 pieces
  }
}
// The data of that message: a function of (seed, src, dst, k).
uint64_t msgSeed(uint64_t seed, int dst, int k) { return seed * 1000003 + uint64_t(dst) * 64 + k; }

// This rank's listing order: (peer, k) pairs with every peer's messages in k order but peers
// interleaved in a rank-specific random order.
std::vector<std::pair<int, int>> listing(uint64_t seed, int rank, int size, int perPeer, bool sends) {
  std::vector<int> peers;
  for (int p = 0; p < size; ++p)
    for (int k = 0; k < perPeer; ++k) peers.push_back(p);
  std::mt19937_64 g(rnd(seed, rank, sends ? 1 : 2));
  std::shuffle(peers.begin(), peers.end(), g);
  std::vector<int> next(size_t(size), 0);
  std::vector<std::pair<int, int>> out;
  for (int p : peers) out.push_back({p, next[size_t(p)]++});
  return out;
}

void groupRound(Comm& comm, int rank, int size, uint64_t seed, DataType t, int perPeer) {
  const size_t es = esize(t);
  std::vector<Buf> sendBufs, recvBufs;
  std::vector<P2PSend> sends;
  std::vector<P2PRecv> recvs;
  std::vector<std::pair<int, int>> recvWho;
  for (auto [p, k] : listing(seed, rank, size, perPeer, true)) {
    const size_t bytes = msgCount(seed, rank, p, k, t) * es;
    sendBufs.emplace_back(bytes);
    fillBytes(sendBufs.back().data(), bytes, msgSeed(seed, p, k), rank);
  }
  size_t i = 0;
  for (auto [p, k] : listing(seed, rank, size, perPeer, true))
    sends.push_back({p, sendBufs[i++].data(), msgCount(seed, rank, p, k, t)});
  for (auto [p, k] : listing(seed, rank, size, perPeer, false)) {
    recvBufs.push_back(poisoned(msgCount(seed, p, rank, k, t) * es + 8));
    recvWho.push_back({p, k});
  }
  for (size_t j = 0; j < recvBufs.size(); ++j)
    recvs.push_back({recvWho[j].first, recvBufs[j].data(), msgCount(seed, recvWho[j].first, rank, recvWho[j].second, t)});
  comm.sendRecv(sends, recvs, t);
  for (size_t j = 0; j < recvs.size(); ++j) {
    const auto [p, k] = recvWho[j];
    const size_t bytes = recvs[j].count * es;
    MP_CHECK(bytesMatch(recvBufs[j].data(), bytes, msgSeed(seed, rank, k), p),
             "%s: message %d from rank %d (%zu bytes) has the wrong data", dtypeName(t), k, p, bytes);
    MP_CHECK(allPoison(recvBufs[j].data() + bytes, 8), "message %d from rank %d: wrote past the end", k, p);
  }
  i = 0;
  for (auto [p, k] : listing(seed, rank, size, perPeer, true)) {
    MP_CHECK(bytesMatch(sendBufs[i].data(), sendBufs[i].size(), msgSeed(seed, p, k), rank),
             "send buffer %zu changed", i);
    ++i;
  }
}

}  // namespace

// Every rank sends several messages to every rank (itself included), listed in its own random
// order, sizes from 0 to many channel pieces; every dtype width.
TEST(HostSendRecv, AnyListingOrderAtWorldSizes2To8) {
  for (int n = 2; n <= 8; ++n) {
    auto res = runSmallSlot(n, [](Comm& comm, int rank, int size) {
      uint64_t seed = 100;
      for (DataType t : {DataType::f32, DataType::bf16, DataType::fp8_e4m3, DataType::i64})
        groupRound(comm, rank, size, ++seed, t, 3);
      for (int it = 0; it < 5; ++it) groupRound(comm, rank, size, ++seed, DataType::u8, 1);
      comm.barrier();
    });
    ASSERT_TRUE(res.ok()) << n << " ranks:\n" << res.log;
  }
}

// Two ranks that each send far more than the channel holds before receiving: plain send/recv
// in this order would deadlock; one group does not. Then a group matched by plain calls.
TEST(HostSendRecv, LargeCrossingMessagesAndPlainCalls) {
  auto res = runSmallSlot(2, [](Comm& comm, int rank, int size) {
    const int peer = 1 - rank;
    const size_t count = (1 << 20) + 5;  // 4 MiB of f32 through 4 KiB pieces
    std::vector<float> out(count), in(count, -1.0f);
    fillBytes(out.data(), count * 4, 77, rank);
    comm.sendRecv({{peer, out.data(), count}}, {{peer, in.data(), count}}, DataType::f32);
    MP_CHECK(bytesMatch(in.data(), count * 4, 77, peer), "crossing 4 MiB messages");
    // Rank 0 groups two sends; rank 1 receives them with plain recv() calls, in order.
    std::vector<int> a(3000), b(5);
    if (rank == 0) {
      std::iota(a.begin(), a.end(), 1);
      std::iota(b.begin(), b.end(), 9000);
      comm.sendRecv({{1, a.data(), a.size()}, {1, b.data(), b.size()}}, {}, DataType::i32);
    } else {
      std::vector<int> ga(3000, -1), gb(5, -1);
      comm.recv(ga.data(), ga.size(), DataType::i32, 0);
      comm.recv(gb.data(), gb.size(), DataType::i32, 0);
      MP_CHECK(ga[0] == 1 && ga[2999] == 3000 && gb[0] == 9000 && gb[4] == 9004, "order lost");
    }
    comm.barrier();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// Bad lists raise cclxInvalidArgument before anything moves; a valid call afterwards works.
TEST(HostSendRecv, BadListsRejectedBeforeAnything) {
  auto res = runSmallSlot(3, [](Comm& comm, int rank, int size) {
    Buf a = poisoned(64), b = poisoned(64);
    auto expect = [&](const std::function<void()>& f, const char* word) {
      try {
        f();
        MP_CHECK(false, "no error for the '%s' case", word);
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidArgument, "%s: code %d (%s)", word, int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find(word) != std::string::npos, "'%s' lacks '%s'", e.what(), word);
      }
    };
    const DataType f = DataType::f32;
    expect([&] { comm.sendRecv({{size, a.data(), 4}}, {}, f); }, "outside");
    expect([&] { comm.sendRecv({}, {{-1, a.data(), 4}}, f); }, "outside");
    expect([&] { comm.sendRecv({{(rank + 1) % size, nullptr, 4}}, {}, f); }, "null");
    expect([&] { comm.sendRecv({{rank, a.data(), 4}}, {}, f); }, "receive(s) from it");
    expect([&] { comm.sendRecv({{rank, a.data(), 4}}, {{rank, b.data(), 3}}, f); }, "elements");
    expect([&] { comm.sendRecv({}, {{(rank + 1) % size, a.data(), 8}, {(rank + 2) % size, a.data() + 16, 8}}, f); },
           "overlap");
    expect([&] { comm.sendRecv({{(rank + 1) % size, a.data(), 8}}, {{(rank + 2) % size, a.data() + 28, 1}}, f); },
           "overlaps send");
    expect([&] { comm.sendRecv({}, {}, DataType(99)); }, "data type");
    MP_CHECK(allPoison(a.data(), a.size()) && allPoison(b.data(), b.size()), "a rejected call wrote");
    // A receive from itself into its own send buffer is a no-op, and zero-count messages carry
    // nothing; a ring shift still works after all that.
    int mine = rank, got = -1;
    comm.sendRecv({{rank, &mine, 1}, {(rank + 1) % size, &mine, 1}, {(rank + 2) % size, &mine, 0}},
                   {{rank, &mine, 1}, {(rank + size - 1) % size, &got, 1}, {(rank + size - 2) % size, &got, 0}},
                   DataType::i32);
    MP_CHECK(got == (rank + size - 1) % size && mine == rank, "ring shift got %d", got);
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// A message whose size differs from the receiver's fails on the receiver, naming both sides; a
// rank that never calls makes the group time out naming it.
TEST(HostSendRecv, SizeMismatchAndMissingRankAreNamed) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    Options o = testOpts();
    o.name = "mismatch";
    auto comm = smallSlotComm(rank, size, store, o);
    std::vector<float> v(100, 1.0f);
    if (rank == 0) {
      comm->sendRecv({{1, v.data(), 100}}, {}, DataType::f32);  // fits the channel: returns
    } else if (rank == 1) {
      try {
        comm->sendRecv({}, {{0, v.data(), 50}}, DataType::f32);
        MP_CHECK(false, "size mismatch not detected");
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidUsage, "code %d: %s", int(e.code()), e.what());
        std::string m = e.what();
        MP_CHECK(m.find("rank 0 sent a message of 400 bytes") != std::string::npos &&
                     m.find("rank 1 expects 200") != std::string::npos, "unclear: %s", m.c_str());
      }
    }
    // Rank 2 waits for a message from rank 1 that never comes.
    Options t = testOpts();
    t.name = "missing";
    auto c2 = makeCpuComm(rank, size, store, t);
    if (rank == 2) {
      CollOptions co;
      co.timeout = std::chrono::milliseconds(1500);
      std::vector<float> w(10);
      auto t0 = std::chrono::steady_clock::now();
      try {
        c2->sendRecv({{0, v.data(), 10}}, {{1, w.data(), 10}}, DataType::f32, co);
        MP_CHECK(false, "no timeout");
      } catch (const Error& e) {
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        MP_CHECK(e.code() == cclxTimeout, "code %d: %s", int(e.code()), e.what());
        MP_CHECK(std::string(e.what()).find("rank(s) [1] did not arrive") != std::string::npos,
                 "does not name rank 1: %s", e.what());
        MP_CHECK(s >= 1.4 && s < 10, "timed out after %.2f s", s);
      }
    } else if (rank == 0) {
      std::vector<float> w(10);
      c2->recv(w.data(), 10, DataType::f32, 2);  // rank 2's send reaches rank 0
    }
    store->set("done/" + std::to_string(rank), "1");
    store->wait({"done/0", "done/1", "done/2"}, std::chrono::seconds(30));
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

// The collectives lowered onto the grouped primitive, against references, in and out of place.
TEST(HostSendRecv, LoweredCollectives) {
  for (int n : {2, 3, 5, 8}) {
    auto res = runSmallSlot(n, [](Comm& comm, int rank, int size) {
      const size_t N = size_t(size);
      uint64_t seed = 7000;
      for (DataType t : {DataType::f64, DataType::bf16, DataType::u8})
        for (size_t count : {0ul, 1ul, 1501ul}) {
          const size_t es = esize(t), bytes = count * es;
          for (int root = 0; root < size; root += size - 1) {
            // scatter: root's block r goes to rank r.
            ++seed;
            std::vector<Buf> blocks(N);
            std::vector<const void*> ins(N);
            for (size_t r = 0; r < N; ++r) {
              blocks[r].resize(bytes);
              fillBytes(blocks[r].data(), bytes, seed, int(r));
              ins[r] = blocks[r].data();
            }
            Buf out = poisoned(bytes + 4);
            comm.scatter(rank == root ? ins : std::vector<const void*>{}, out.data(), count, t, root);
            MP_CHECK(bytesMatch(out.data(), bytes, seed, rank) && allPoison(out.data() + bytes, 4),
                     "scatter %s count %zu root %d", dtypeName(t), count, root);
            // scatter in place on the root (its output is its own block).
            if (rank == root) {
              comm.scatter(ins, blocks[size_t(rank)].data(), count, t, root);
              MP_CHECK(bytesMatch(blocks[size_t(rank)].data(), bytes, seed, rank), "scatter in place");
            } else {
              comm.scatter({}, out.data(), count, t, root);
            }
            // gather and gatherSingle (in place on the root: input = own slot).
            Buf mine(bytes);
            fillBytes(mine.data(), bytes, ++seed, rank);
            std::vector<Buf> outs(N, poisoned(bytes + 4));
            std::vector<void*> outPtrs(N);
            for (size_t r = 0; r < N; ++r) outPtrs[r] = outs[r].data();
            comm.gather(mine.data(), outPtrs, count, t, root);
            Buf single = poisoned(N * bytes + 4);
            const void* in = mine.data();
            if (rank == root) {
              if (bytes) std::memcpy(single.data() + size_t(rank) * bytes, mine.data(), bytes);
              in = single.data() + size_t(rank) * bytes;
            }
            comm.gatherSingle(in, single.data(), count, t, root);
            for (size_t r = 0; r < N && rank == root; ++r) {
              MP_CHECK(bytesMatch(outs[r].data(), bytes, seed, int(r)) && allPoison(outs[r].data() + bytes, 4),
                       "gather %s count %zu block %zu", dtypeName(t), count, r);
              MP_CHECK(bytesMatch(single.data() + r * bytes, bytes, seed, int(r)), "gatherSingle block %zu", r);
            }
            if (rank == root) MP_CHECK(allPoison(single.data() + N * bytes, 4), "gatherSingle wrote past the end");
            if (rank != root) MP_CHECK(allPoison(outs[0].data(), bytes + 4), "gather wrote on a non-root");
          }
          // allGatherV: rank r contributes count + 3r elements (count 0: rank 0 contributes none).
          {
            ++seed;
            std::vector<size_t> counts(N);
            for (size_t r = 0; r < N; ++r) counts[r] = count ? count + 3 * r : r % 2;
            std::vector<Buf> outs(N);
            std::vector<void*> ptrs(N);
            for (size_t r = 0; r < N; ++r) {
              outs[r] = poisoned(counts[r] * es + 4);
              ptrs[r] = outs[r].data();
            }
            fillBytes(outs[size_t(rank)].data(), counts[size_t(rank)] * es, seed, rank);  // in place
            comm.allGatherV(ptrs[size_t(rank)], ptrs, counts, t);
            for (size_t r = 0; r < N; ++r)
              MP_CHECK(bytesMatch(outs[r].data(), counts[r] * es, seed, int(r)) &&
                           allPoison(outs[r].data() + counts[r] * es, 4),
                       "allGatherV %s block %zu", dtypeName(t), r);
          }
          // allToAllList: rank i sends c(i, j) elements to rank j.
          {
            ++seed;
            auto c = [&](size_t i, size_t j) { return count ? (count + 7 * i + 3 * j) % (count + 11) : (i + j) % 2; };
            std::vector<Buf> sb(N), rb(N);
            std::vector<const void*> sp(N);
            std::vector<void*> rp(N);
            std::vector<size_t> sc(N), rc(N);
            for (size_t j = 0; j < N; ++j) {
              sc[j] = c(size_t(rank), j);
              rc[j] = c(j, size_t(rank));
              sb[j].resize(sc[j] * es);
              fillBytes(sb[j].data(), sb[j].size(), seed + j, rank);
              rb[j] = poisoned(rc[j] * es + 4);
              sp[j] = sb[j].data();
              rp[j] = rb[j].data();
            }
            comm.allToAllList(sp, sc, rp, rc, t);
            for (size_t j = 0; j < N; ++j)
              MP_CHECK(bytesMatch(rb[j].data(), rc[j] * es, seed + size_t(rank), int(j)) &&
                           allPoison(rb[j].data() + rc[j] * es, 4),
                       "allToAllList %s from %zu", dtypeName(t), j);
          }
        }
    });
    ASSERT_TRUE(res.ok()) << n << " ranks:\n" << res.log;
  }
}

// reduceScatterV: every dtype and op at 3 ranks, a few at 2, 5 and 8; uneven blocks (some
// empty), in and out of place; counts that differ between ranks fail on every rank alike.
TEST(HostSendRecv, ReduceScatterV) {
  for (int n : {3, 2, 5, 8}) {
    auto res = runSmallSlot(n, [](Comm& comm, int rank, int size) {
      const size_t N = size_t(size);
      uint64_t seed = 9000;
      const bool all = size == 3;
      const std::vector<DataType> types =
          all ? allDtypes() : std::vector<DataType>{DataType::f32, DataType::bf16, DataType::i32};
      for (DataType t : types)
        for (ReduceOp op : opsFor(t))
          for (size_t base : {0ul, 1ul, 1999ul})
            for (bool inPlace : {false, true}) {
              if (!all && op.kind != RedOpKind::SUM && op.kind != RedOpKind::MAX &&
                  op.kind != RedOpKind::AVG)
                continue;
              const size_t es = esize(t);
              std::vector<size_t> counts(N), first(N + 1, 0);
              for (size_t r = 0; r < N; ++r) {
                counts[r] = base ? base + 517 * r : (r == N - 1 ? 3 : 0);
                first[r + 1] = first[r] + counts[r];
              }
              // Block r of every rank's input is element range [first[r], first[r+1]) of the
              // reference, so rank r's result is the reference at first[r].
              ++seed;
              Buf all(first[N] * es);
              fillInput(all.data(), t, op.kind, seed, rank, first[N]);
              std::vector<const void*> ins(N);
              for (size_t r = 0; r < N; ++r) ins[r] = all.data() + first[r] * es;
              const size_t mine = counts[size_t(rank)];
              Buf out = poisoned(mine * es + 4);
              void* dst = inPlace ? const_cast<void*>(ins[size_t(rank)]) : out.data();
              comm.reduceScatterV(ins, counts, dst, t, op);
              std::string err = checkReduced(t, op, seed, size, dst, mine, first[size_t(rank)]);
              MP_CHECK(err.empty(), "%s %s base %zu inPlace %d: %s", dtypeName(t), opName(op.kind), base,
                       int(inPlace), err.c_str());
              if (!inPlace) MP_CHECK(allPoison(out.data() + mine * es, 4), "wrote past the end");
            }
      // Counts that differ between ranks.
      std::vector<size_t> counts(N, 5);
      if (rank == 1) counts[0] = 6;
      std::vector<float> in(16 * N), out(8);
      std::vector<const void*> ins(N);
      for (size_t r = 0; r < N; ++r) ins[r] = in.data() + 8 * r;
      try {
        comm.reduceScatterV(ins, counts, out.data(), DataType::f32, RedOpKind::SUM);
        MP_CHECK(false, "mismatched counts accepted");
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidArgument && std::string(e.what()).find("rank 1 passes") != std::string::npos,
                 "code %d: %s", int(e.code()), e.what());
      }
      // The output overlapping another rank's input is rejected before anything runs.
      try {
        comm.reduceScatterV(ins, std::vector<size_t>(N, 5), const_cast<void*>(ins[(size_t(rank) + 1) % N]),
                             DataType::f32, RedOpKind::SUM);
        MP_CHECK(false, "overlapping output accepted");
      } catch (const Error& e) {
        MP_CHECK(e.code() == cclxInvalidArgument, "code %d: %s", int(e.code()), e.what());
      }
      comm.barrier();
    });
    ASSERT_TRUE(res.ok()) << n << " ranks:\n" << res.log;
  }
}

// Check mode compares lowered collectives like any other: matching calls pass, a count that
// differs between ranks fails on every rank before anything moves.
TEST(HostSendRecv, CheckModeCoversLoweredCollectives) {
  auto res = runRanks(3, [](int rank, int size, std::shared_ptr<Store> store) {
    setenv("CCLX_CHECK_MODE", "1", 1);
    auto comm = smallSlotComm(rank, size, store);
    std::vector<float> in(8, float(rank)), out(8 * size_t(size), -1.0f);
    comm->gatherSingle(in.data(), out.data(), 8, DataType::f32, 1);
    if (rank == 1)
      for (int r = 0; r < size; ++r) MP_CHECK(out[size_t(r) * 8 + 7] == float(r), "gather block %d", r);
    std::vector<size_t> counts = {1, 2, 3};
    std::vector<void*> outs = {out.data(), out.data() + 1, out.data() + 3};
    comm->allGatherV(in.data(), outs, counts, DataType::f32);
    // Rank 2 gathers 7 elements where the others gather 8.
    try {
      comm->gather(in.data(), {out.data(), out.data() + 8, out.data() + 16}, rank == 2 ? 7 : 8,
                   DataType::f32, 0);
      MP_CHECK(false, "mismatched gather passed check mode");
    } catch (const Error& e) {
      MP_CHECK(e.code() == cclxInvalidUsage && std::string(e.what()).find("Gather") != std::string::npos,
               "code %d: %s", int(e.code()), e.what());
    }
    // A root that differs between ranks.
    try {
      comm->scatter({in.data(), in.data(), in.data()}, out.data(), 8, DataType::f32, rank == 0 ? 1 : 0);
      MP_CHECK(false, "mismatched root passed check mode");
    } catch (const Error& e) {
      MP_CHECK(e.code() == cclxInvalidUsage && std::string(e.what()).find("root=") != std::string::npos,
               "code %d: %s", int(e.code()), e.what());
    }
    comm->barrier();
    comm->finalize();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}
