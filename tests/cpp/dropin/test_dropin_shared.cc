// CPU twin of the NCCL drop-in's shared-GPU mode (src/nccl_dropin/shared): the NCCL API as the
// drop-in's entry points dispatch it for a shared comm (helpers/dropin_twin.h), over cclx's host
// transport, at world sizes 2..8 (one process per rank): every reduction and type, the data
// movement collectives, groups of sends and receives. test_dropin_shared_life.cc has creation,
// split, shrink, the life cycle, the errors and a killed rank; the GPU run of the same dispatch
// under torch.distributed is tests/gpu/dropin/test_gpu_dropin_shared.py.
#include <gtest/gtest.h>

#include "helpers/dropin_twin.h"

using namespace twin;
using cclx::test::runRanks;

// Every reduction NCCL has (sum, prod, max, min, avg, a PreMulSum handle) on every type torch
// passes, allreduce / reduce / reduce-scatter in and out of place at odd counts; all-gather,
// broadcast (and in place, as ncclBcast), all-to-all on raw bytes.
TEST(DropinShared, CollectivesMatchTheReference) {
  for (int n : {2, 3, 5, 8}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      setUpRank();
      ncclComm_t c = makeComm(rank, size, *store, "uid");
      int cnt = 0, me = -1;
      MP_CHECK(sh::count(SHARED(c), &cnt) == ncclSuccess && cnt == size, "ncclCommCount %d", cnt);
      MP_CHECK(sh::userRank(SHARED(c), &me) == ncclSuccess && me == rank, "ncclCommUserRank %d", me);
      uint64_t seed = 7000 + uint64_t(size) * 100;
      const size_t count = 1031;
      for (DataType t : kTypes) {
        const size_t es = esize(t);
        for (const OpCase& op : opsOf(c, t)) {
          for (bool inPlace : {false, true}) {
            Buf in(count * es), out = poisoned(count * es);
            fillInput(in.data(), t, op.ref.kind, ++seed, rank, count);
            void* o = inPlace ? in.data() : out.data();
            MP_CHECK(AllReduce(in.data(), o, count, ncclType(t), op.nccl, c) == ncclSuccess,
                     "ncclAllReduce: %s", LastError());
            std::string err = checkReduced(t, op.ref, seed, size, o, count);
            MP_CHECK(err.empty(), "allreduce %s %s: %s", dtypeName(t), opName(op.ref.kind), err.c_str());
            const int root = (size - 1 + int(inPlace)) % size;
            Buf in2(count * es), out2 = poisoned(count * es);
            fillInput(in2.data(), t, op.ref.kind, ++seed, rank, count);
            void* o2 = inPlace ? in2.data() : out2.data();
            MP_CHECK(Reduce(in2.data(), o2, count, ncclType(t), op.nccl, root, c) == ncclSuccess,
                     "ncclReduce: %s", LastError());
            if (rank == root) {
              err = checkReduced(t, op.ref, seed, size, o2, count);
              MP_CHECK(err.empty(), "reduce %s %s: %s", dtypeName(t), opName(op.ref.kind), err.c_str());
            }
            const size_t per = 257;  // reduce-scatter: elements per rank
            Buf in3(per * size_t(size) * es), out3 = poisoned(per * es);
            fillInput(in3.data(), t, op.ref.kind, ++seed, rank, per * size_t(size));
            void* o3 = inPlace ? in3.data() + size_t(rank) * per * es : out3.data();
            MP_CHECK(ReduceScatter(in3.data(), o3, per, ncclType(t), op.nccl, c) == ncclSuccess,
                     "ncclReduceScatter: %s", LastError());
            err = checkReduced(t, op.ref, seed, size, o3, per, size_t(rank) * per);
            MP_CHECK(err.empty(), "reduce_scatter %s %s: %s", dtypeName(t), opName(op.ref.kind),
                     err.c_str());
          }
          if (op.made) MP_CHECK(sh::redOpDestroy(SHARED(c), op.nccl) == ncclSuccess, "ncclRedOpDestroy");
        }
      }
      // Data movement: every byte pattern (FP8 types travel as they are).
      for (DataType t : {DataType::u8, DataType::bf16, DataType::f64, DataType::fp8_e4m3}) {
        const size_t es = esize(t), c1 = 777, N = size_t(size);
        Buf mine(c1 * es), all = poisoned(N * c1 * es);
        fillBytes(mine.data(), mine.size(), ++seed, rank);
        MP_CHECK(AllGather(mine.data(), all.data(), c1, ncclType(t), c) == ncclSuccess, "%s", LastError());
        for (int r = 0; r < size; ++r)
          MP_CHECK(bytesMatch(all.data() + size_t(r) * c1 * es, c1 * es, seed, r), "allgather block %d", r);
        const int root = 1 % size;
        Buf b = poisoned(c1 * es);
        if (rank == root) fillBytes(b.data(), b.size(), ++seed, root);
        else ++seed;
        MP_CHECK(sh::broadcast(SHARED(c), b.data(), b.data(), c1, ncclType(t), root, nullptr,
                               "ncclBcast") == ncclSuccess, "ncclBcast: %s", LastError());
        MP_CHECK(bytesMatch(b.data(), b.size(), seed, root), "bcast from %d", root);
        Buf a2aIn(N * c1 * es), a2aOut = poisoned(N * c1 * es);
        fillBytes(a2aIn.data(), a2aIn.size(), ++seed, rank);
        MP_CHECK(AlltoAll(a2aIn.data(), a2aOut.data(), c1, ncclType(t), c) == ncclSuccess, "%s", LastError());
        for (int r = 0; r < size; ++r)  // block r of the output = block `rank` of r's input
          MP_CHECK(bytesMatch(a2aOut.data() + size_t(r) * c1 * es, c1 * es, seed, r, size_t(rank) * c1 * es),
                   "alltoall block %d", r);
      }
      MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess, "ncclCommDestroy");
      finishRank(rank, size, *store);
    });
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}

namespace {

// Elements rank `src` sends rank `dst` in the uneven all-to-all (zero for some pairs).
size_t splitCount(int src, int dst, int n) { return size_t((src * 7 + dst * 3 + n) % 5) * 97; }

}  // namespace

// Groups as torch issues them: all_to_all_single with uneven splits (sends and receives to every
// rank, itself included, zero-size ones among them), batch_isend_irecv both ways round a ring
// with several messages of mixed types per pair, collectives and messages in one coalesced group,
// a send and a receive outside any group, groups that span two comms listed in opposite orders
// on alternate ranks, nested groups, ncclGroupSimulateEnd (runs nothing), ncclGather and
// ncclScatter.
TEST(DropinShared, GroupsOfSendsAndReceives) {
  for (int n : {2, 3, 4, 8}) {
    auto res = runRanks(n, [](int rank, int size, std::shared_ptr<Store> store) {
      setUpRank();
      ncclComm_t c = makeComm(rank, size, *store, "uid");
      ncclComm_t c2 = makeComm(rank, size, *store, "uid2");
      const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
      uint64_t seed = 100 + uint64_t(size);
      // all_to_all_single with uneven splits, f32 (torch: ncclSend/ncclRecv to every rank).
      {
        std::vector<size_t> so(size_t(size) + 1, 0), ro(size_t(size) + 1, 0);
        for (int r = 0; r < size; ++r) {
          so[size_t(r) + 1] = so[size_t(r)] + splitCount(rank, r, size);
          ro[size_t(r) + 1] = ro[size_t(r)] + splitCount(r, rank, size);
        }
        Buf in(so.back() * 4), out = poisoned(ro.back() * 4 + 4);
        for (int r = 0; r < size; ++r)  // the block for r is a function of (rank, r)
          fillBytes(in.data() + so[size_t(r)] * 4, splitCount(rank, r, size) * 4, seed, rank * 64 + r);
        MP_CHECK(GroupStart() == ncclSuccess, "group");
        for (int r = 0; r < size; ++r) {
          MP_CHECK(Send(in.data() + so[size_t(r)] * 4, splitCount(rank, r, size), ncclFloat32, r, c) == ncclSuccess, "%s", LastError());
          MP_CHECK(Recv(out.data() + ro[size_t(r)] * 4, splitCount(r, rank, size), ncclFloat32, r, c) == ncclSuccess, "%s", LastError());
        }
        MP_CHECK(GroupEnd() == ncclSuccess, "ncclGroupEnd (all_to_all_v): %s", LastError());
        for (int r = 0; r < size; ++r)
          MP_CHECK(bytesMatch(out.data() + ro[size_t(r)] * 4, splitCount(r, rank, size) * 4, seed, r * 64 + rank),
                   "all_to_all_v block from %d", r);
        MP_CHECK(uint8_t(out[ro.back() * 4]) == kPoison, "all_to_all_v wrote past its output");
      }
      // batch_isend_irecv both ways round the ring: three messages of mixed types per direction.
      {
        const DataType types[3] = {DataType::f32, DataType::bf16, DataType::i64};
        const size_t counts[3] = {1000, 333, 5};
        const bool both = size > 2;  // with two ranks, next and prev are one peer
        Buf toNext[3], toPrev[3], fromPrev[3], fromNext[3];
        MP_CHECK(GroupStart() == ncclSuccess, "group");
        for (int k = 0; k < 3; ++k) {
          const size_t b = counts[k] * esize(types[k]);
          toNext[k].resize(b);
          toPrev[k].resize(b);
          fillBytes(toNext[k].data(), b, seed + 1, rank * 16 + k);
          fillBytes(toPrev[k].data(), b, seed + 2, rank * 16 + k);
          fromPrev[k] = poisoned(b);
          fromNext[k] = poisoned(b);
          MP_CHECK(Send(toNext[k].data(), counts[k], ncclType(types[k]), next, c) == ncclSuccess, "send");
          if (both)
            MP_CHECK(Recv(fromNext[k].data(), counts[k], ncclType(types[k]), next, c) == ncclSuccess, "recv");
          MP_CHECK(Recv(fromPrev[k].data(), counts[k], ncclType(types[k]), prev, c) == ncclSuccess, "recv");
          if (both)
            MP_CHECK(Send(toPrev[k].data(), counts[k], ncclType(types[k]), prev, c) == ncclSuccess, "send");
        }
        MP_CHECK(GroupEnd() == ncclSuccess, "ncclGroupEnd (ring): %s", LastError());
        for (int k = 0; k < 3; ++k) {
          const size_t b = counts[k] * esize(types[k]);
          MP_CHECK(bytesMatch(fromPrev[k].data(), b, seed + 1, prev * 16 + k), "message %d from %d", k, prev);
          MP_CHECK(!both || bytesMatch(fromNext[k].data(), b, seed + 2, next * 16 + k), "message %d from %d", k, next);
        }
      }
      // A coalesced group: two allreduces and a message in one group; then a send and a receive
      // outside any group (even ranks send first, so the pairs meet in order).
      {
        const size_t count = 513;
        Buf a(count * 4), b(count * 8), msg(64), got = poisoned(64);
        fillInput(a.data(), DataType::i32, RedOpKind::SUM, seed + 3, rank, count);
        fillInput(b.data(), DataType::f64, RedOpKind::MAX, seed + 4, rank, count);
        fillBytes(msg.data(), 64, seed + 5, rank);
        MP_CHECK(GroupStart() == ncclSuccess, "group");
        MP_CHECK(AllReduce(a.data(), a.data(), count, ncclInt32, ncclSum, c) == ncclSuccess, "ar");
        MP_CHECK(Send(msg.data(), 64, ncclUint8, next, c) == ncclSuccess, "send");
        MP_CHECK(Recv(got.data(), 64, ncclUint8, prev, c) == ncclSuccess, "recv");
        MP_CHECK(AllReduce(b.data(), b.data(), count, ncclFloat64, ncclMax, c) == ncclSuccess, "ar");
        for (size_t i = 0; i < 4; ++i)
          MP_CHECK(uint8_t(got[i]) == kPoison, "a grouped receive ran before ncclGroupEnd");
        MP_CHECK(GroupEnd() == ncclSuccess, "ncclGroupEnd (coalesced): %s", LastError());
        std::string e1 = checkReduced(DataType::i32, RedOpKind::SUM, seed + 3, size, a.data(), count);
        std::string e2 = checkReduced(DataType::f64, RedOpKind::MAX, seed + 4, size, b.data(), count);
        MP_CHECK(e1.empty() && e2.empty(), "coalesced allreduces: %s %s", e1.c_str(), e2.c_str());
        MP_CHECK(bytesMatch(got.data(), 64, seed + 5, prev), "coalesced message");
        Buf one(100), back = poisoned(100);
        fillBytes(one.data(), 100, seed + 6, rank);
        const bool sender = rank % 2 == 0;
        const int partner = sender ? rank + 1 : rank - 1;
        if (partner < size) {
          for (int step = 0; step < 2; ++step) {
            if (sender == (step == 0)) {
              MP_CHECK(Send(one.data(), 100, ncclUint8, partner, c) == ncclSuccess, "%s", LastError());
            } else {
              MP_CHECK(Recv(back.data(), 100, ncclUint8, partner, c) == ncclSuccess, "%s", LastError());
            }
          }
          MP_CHECK(bytesMatch(back.data(), 100, seed + 6, partner), "single send/recv from %d", partner);
        }
      }
      // Two comms in one group, listed in opposite orders on alternate ranks: they run in the
      // comms' order on every rank (a rank that ran its second comm first would wait forever).
      {
        Buf x(5000), y(7000), gx = poisoned(5000), gy = poisoned(7000);
        fillBytes(x.data(), x.size(), seed + 7, rank);
        fillBytes(y.data(), y.size(), seed + 8, rank);
        MP_CHECK(GroupStart() == ncclSuccess, "group");
        for (int k = 0; k < 2; ++k) {
          const bool first = (k == 0) == (rank % 2 == 0);
          ncclComm_t cc = first ? c : c2;
          Buf& s = first ? x : y;
          Buf& g = first ? gx : gy;
          MP_CHECK(Send(s.data(), s.size(), ncclUint8, next, cc) == ncclSuccess, "send");
          MP_CHECK(Recv(g.data(), g.size(), ncclUint8, prev, cc) == ncclSuccess, "recv");
        }
        MP_CHECK(GroupEnd() == ncclSuccess, "ncclGroupEnd (two comms): %s", LastError());
        MP_CHECK(bytesMatch(gx.data(), gx.size(), seed + 7, prev) &&
                     bytesMatch(gy.data(), gy.size(), seed + 8, prev), "two-comm group");
      }
      // Nested groups run at the outermost end; a simulated end runs nothing.
      {
        Buf v(400);
        fillInput(v.data(), DataType::f32, RedOpKind::SUM, seed + 9, rank, 100);
        const Buf orig = v;
        MP_CHECK(GroupStart() == ncclSuccess && GroupStart() == ncclSuccess, "groups");
        MP_CHECK(AllReduce(v.data(), v.data(), 100, ncclFloat32, ncclSum, c) == ncclSuccess, "ar");
        MP_CHECK(GroupEnd() == ncclSuccess, "inner end");
        MP_CHECK(v == orig, "a call ran at an inner ncclGroupEnd");
        MP_CHECK(GroupEnd() == ncclSuccess, "outer end: %s", LastError());
        std::string e = checkReduced(DataType::f32, RedOpKind::SUM, seed + 9, size, v.data(), 100);
        MP_CHECK(e.empty(), "nested group allreduce: %s", e.c_str());
        const Buf now = v;
        sh::groupStart();
        MP_CHECK(AllReduce(v.data(), v.data(), 100, ncclFloat32, ncclSum, c) == ncclSuccess, "ar");
        MP_CHECK(sh::groupEnd(/*simulate=*/true) == ncclSuccess, "simulated end");
        MP_CHECK(v == now, "ncclGroupSimulateEnd ran a call");
        MP_CHECK(GroupEnd() != ncclSuccess, "ncclGroupEnd without ncclGroupStart succeeded");
      }
      // ncclGather / ncclScatter (NCCL 2.28's rooted calls).
      {
        const int root = size - 1;
        const size_t cnt = 301;
        Buf mine(cnt * 2), all = poisoned(cnt * 2 * size_t(size));
        fillBytes(mine.data(), mine.size(), seed + 10, rank);
        MP_CHECK(sh::gather(SHARED(c), mine.data(), all.data(), cnt, ncclFloat16, root, nullptr) == ncclSuccess,
                 "ncclGather: %s", LastError());
        if (rank == root)
          for (int r = 0; r < size; ++r)
            MP_CHECK(bytesMatch(all.data() + size_t(r) * cnt * 2, cnt * 2, seed + 10, r), "gather block %d", r);
        Buf src(cnt * 2 * size_t(size)), part = poisoned(cnt * 2);
        fillBytes(src.data(), src.size(), seed + 11, root);
        MP_CHECK(sh::scatter(SHARED(c), rank == root ? src.data() : nullptr, part.data(), cnt, ncclFloat16,
                             root, nullptr) == ncclSuccess, "ncclScatter: %s", LastError());
        MP_CHECK(bytesMatch(part.data(), part.size(), seed + 11, root, size_t(rank) * cnt * 2), "scatter block");
      }
      MP_CHECK(sh::destroy(SHARED(c)) == ncclSuccess && sh::destroy(SHARED(c2)) == ncclSuccess, "destroy");
      finishRank(rank, size, *store);
    });
    ASSERT_TRUE(res.ok()) << "world size " << n << "\n" << res.log;
  }
}
