// core/select/select.h: the one selection function both backends use, checked with made-up
// capabilities (no comm, no GPU needed).
#include <gtest/gtest.h>

#include "core/settings/config.h"
#include "base/error.h"
#include "core/select/select.h"

using namespace cclx;

namespace {

// An exchange collective whose message (one block) is `bytes`.
CollArgs exchange(CollType type, size_t bytes, DataType t = DataType::bf16,
                  RedOpKind op = RedOpKind::SUM) {
  CollArgs a;
  a.type = type;
  a.dtype = t;
  a.count = bytes / dtypeSize(t);
  a.op = op;
  return a;
}

CollArgs allreduce(size_t bytes, DataType t = DataType::f32, RedOpKind op = RedOpKind::SUM) {
  CollArgs a;
  a.type = CollType::AllReduce;
  a.dtype = t;
  a.count = bytes / dtypeSize(t);
  a.op = op;
  return a;
}

// A GPU comm of n ranks with one GPU each: every peer algorithm fits.
Caps gpu(int n) {
  Caps c;
  c.worldSize = n;
  c.nccl = true;
  c.peer = true;
  for (Algo a : {Algo::Flat, Algo::Lamport, Algo::Tree, Algo::LL, Algo::Pipelined, Algo::Fp8,
                 Algo::Fp8OneShot})
    c.allow(a, true);
  return c;
}

Caps host(int n) {
  Caps c = gpu(n);
  c.host = true;
  c.nccl = false;
  return c;
}

}  // namespace

TEST(Select, GpuTablesByWorldSize) {
  Config cfg;
  EXPECT_EQ(select(allreduce(4 << 10), cfg, gpu(2)), Algo::Flat);
  EXPECT_EQ(select(allreduce(2 << 20), cfg, gpu(2)), Algo::Lamport);
  EXPECT_EQ(select(allreduce(32 << 20), cfg, gpu(2)), Algo::Tree);
  EXPECT_EQ(select(allreduce(size_t(128) << 20), cfg, gpu(2)), Algo::Base);
  EXPECT_EQ(select(allreduce(2 << 20), cfg, gpu(8)), Algo::Tree);  // Lamport off above 2 ranks
  EXPECT_EQ(select(allreduce(64 << 20), cfg, gpu(8)), Algo::Base);
  Caps noFlat = gpu(2);
  noFlat.allow(Algo::Flat, false);  // the message does not fit one slot set
  EXPECT_EQ(select(allreduce(4 << 10), cfg, noFlat), Algo::Lamport);
  cfg.ddaTreeMaxBytes = size_t(1) << 30;  // a setting moves a threshold
  EXPECT_EQ(select(allreduce(size_t(128) << 20), cfg, gpu(2)), Algo::Tree);
}

// Ranks that share a GPU: no NCCL, and the size tables (about time) do not apply.
TEST(Select, SharedGpuRunsPeerAlgorithmsAtEverySize) {
  Config cfg;
  Caps c = gpu(8);
  c.nccl = false;
  c.timed = false;
  EXPECT_EQ(select(allreduce(4 << 10), cfg, c), Algo::Flat);
  EXPECT_EQ(select(allreduce(size_t(256) << 20), cfg, c), Algo::Flat);  // flat fits (made up)
  c.allow(Algo::Flat, false);
  EXPECT_EQ(select(allreduce(size_t(256) << 20), cfg, c), Algo::Lamport);
  c.allow(Algo::Lamport, false);
  EXPECT_EQ(select(allreduce(size_t(1) << 30), cfg, c), Algo::Tree);
  // A hint still forces one.
  CollArgs a = allreduce(1 << 10);
  a.opts.hints["algo"] = "tree";
  EXPECT_EQ(select(a, cfg, gpu(3)), Algo::Tree);
  // What no peer algorithm takes goes to NCCL, which the backend then refuses clearly.
  c.peer = false;
  EXPECT_EQ(select(allreduce(4 << 10), cfg, c), Algo::Base);
}

TEST(Select, HintsAndSettings) {
  Config cfg;
  CollArgs a = allreduce(size_t(128) << 20);
  a.opts.hints["algo"] = "flat";
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Flat);
  a.opts.hints["algo"] = "lamport";
  Caps c = gpu(2);
  c.allow(Algo::Lamport, false);
  EXPECT_EQ(select(a, cfg, c), Algo::Tree);  // a forced Lamport that does not fit runs the tree
  a.opts.hints["algo"] = "nccl";
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Base);
  a.opts.hints["algo"] = "auto";
  cfg.allreduceAlgo = "flat";  // an explicit per-call "auto" wins over the setting
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Base);
  a.opts.hints.clear();
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Flat);
  // An unknown name is an argument error on every backend alike.
  a.opts.hints["algo"] = "fastest";
  for (const Caps& k : {gpu(2), host(2)}) {
    try {
      (void)select(a, cfg, k);
      ADD_FAILURE() << "accepted algo=fastest";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), cclxInvalidArgument);
    }
  }
}

TEST(Select, HostRules) {
  Config cfg;
  EXPECT_EQ(select(allreduce(1 << 10), cfg, host(4)), Algo::Flat);
  EXPECT_EQ(select(allreduce(1 << 20), cfg, host(4)), Algo::Tree);
  CollArgs a = allreduce(1 << 20);
  a.opts.hints["algo"] = "nccl";  // no NCCL on CPU comms: the size rule
  EXPECT_EQ(select(a, cfg, host(4)), Algo::Tree);
  a.opts.hints["algo"] = "flat";  // flat works at any size on the host
  EXPECT_EQ(select(a, cfg, host(4)), Algo::Flat);
  a.opts.hints["algo"] = "lamport";
  Caps c = host(4);
  c.allow(Algo::Lamport, false);
  EXPECT_EQ(select(a, cfg, c), Algo::Tree);
}

TEST(Select, LowPrecision) {
  Config cfg;
  cfg.lpAllReduce = true;
  CollArgs a = allreduce(size_t(16) << 20);
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Fp8OneShot);  // 2 ranks up to 32 MiB
  EXPECT_EQ(select(allreduce(size_t(64) << 20), cfg, gpu(2)), Algo::Fp8);
  EXPECT_EQ(select(a, cfg, gpu(8)), Algo::Fp8);  // one-shot off above 2 ranks
  Caps c = gpu(2);
  c.allow(Algo::Fp8OneShot, false);  // a one-shot that does not fit the inboxes runs two-shot
  EXPECT_EQ(select(a, cfg, c), Algo::Fp8);
  a.opts.hints["fp8_algo"] = "twoshot";
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Fp8);
  a.opts.hints["fp8_algo"] = "bogus";
  EXPECT_THROW((void)select(a, cfg, gpu(2)), Error);
  // Bitwise ops and backend "nccl" never take FP8; small messages need the hint.
  Caps ints = gpu(2);
  ints.allow(Algo::Lamport, false);  // the data-as-flag protocol carries float types only
  EXPECT_EQ(select(allreduce(size_t(16) << 20, DataType::i32, RedOpKind::BAND), cfg, ints), Algo::Tree);
  Caps plain = gpu(2);
  plain.plainNccl = true;
  EXPECT_EQ(select(allreduce(size_t(16) << 20), cfg, plain), Algo::Base);
  EXPECT_EQ(select(allreduce(1 << 10), cfg, gpu(2)), Algo::Flat);
  CollArgs ag;
  ag.type = CollType::AllGather;
  ag.dtype = DataType::bf16;
  ag.count = 1000;
  ag.opts.hints["low_precision"] = "fp8";
  EXPECT_EQ(select(ag, cfg, gpu(2)), Algo::Fp8);
  Caps noFp8 = gpu(2);
  noFp8.allow(Algo::Fp8, false);
  EXPECT_EQ(select(ag, cfg, noFp8), Algo::LL);  // the DDA exchange, where FP8 cannot run
  noFp8.peer = false;
  EXPECT_EQ(select(ag, cfg, noFp8), Algo::Base);
}

// Where the data-as-flag kernels are not known to be safe (HIP builds), auto never picks them;
// a hint still forces them.
TEST(Select, DataAsFlagOffLeavesThemToHints) {
  Config cfg;
  Caps c = gpu(2);
  c.dataAsFlag = false;
  EXPECT_EQ(select(allreduce(4 << 10), cfg, c), Algo::Tree);
  EXPECT_EQ(select(allreduce(2 << 20), cfg, c), Algo::Tree);
  CollArgs a = allreduce(4 << 10);
  a.opts.hints["algo"] = "flat";
  EXPECT_EQ(select(a, cfg, c), Algo::Flat);
  a.opts.hints["algo"] = "lamport";
  EXPECT_EQ(select(a, cfg, c), Algo::Lamport);
  cfg.lpAllReduce = true;
  CollArgs f = allreduce(size_t(16) << 20);
  EXPECT_EQ(select(f, cfg, c), Algo::Fp8);  // auto: two-shot
  f.opts.hints["fp8_algo"] = "oneshot";
  EXPECT_EQ(select(f, cfg, c), Algo::Fp8OneShot);
}

TEST(Select, Barrier) {
  Config cfg;
  CollArgs b;
  b.type = CollType::Barrier;
  Caps c = gpu(2);
  EXPECT_EQ(select(b, cfg, c), Algo::Base);
  c.allow(Algo::PeerBarrier, true);
  EXPECT_EQ(select(b, cfg, c), Algo::PeerBarrier);
  c.plainNccl = true;
  EXPECT_EQ(select(b, cfg, c), Algo::Base);
}

// All-gather, reduce-scatter, all-to-all: DDA up to the collective's size (bytes of the larger
// buffer: N blocks), LL while one block fits the flat allreduce's size, pipelined above, NCCL
// beyond; the settings move the limits.
TEST(Select, ExchangeTablesByCollective) {
  Config cfg;
  const int n = 8;
  // All-gather: 16 MiB of output.
  EXPECT_EQ(select(exchange(CollType::AllGather, 4 << 10), cfg, gpu(n)), Algo::LL);
  EXPECT_EQ(select(exchange(CollType::AllGather, 1 << 20), cfg, gpu(n)), Algo::Pipelined);
  EXPECT_EQ(select(exchange(CollType::AllGather, 2 << 20), cfg, gpu(n)), Algo::Pipelined);   // 16 MiB
  EXPECT_EQ(select(exchange(CollType::AllGather, 4 << 20), cfg, gpu(n)), Algo::Base);   // 32 MiB
  // Reduce-scatter: 8 MiB of input; all-to-all: 2 MiB.
  EXPECT_EQ(select(exchange(CollType::ReduceScatter, 1 << 20), cfg, gpu(n)), Algo::Pipelined);
  EXPECT_EQ(select(exchange(CollType::ReduceScatter, 2 << 20), cfg, gpu(n)), Algo::Base);
  EXPECT_EQ(select(exchange(CollType::AllToAll, 256 << 10), cfg, gpu(n)), Algo::Pipelined);
  EXPECT_EQ(select(exchange(CollType::AllToAll, 512 << 10), cfg, gpu(n)), Algo::Base);
  EXPECT_EQ(ddaExchangeMaxBytes(cfg, CollType::AllGather, 2), size_t(16) << 20);
  EXPECT_EQ(ddaExchangeMaxBytes(cfg, CollType::ReduceScatter, 4), size_t(8) << 20);
  EXPECT_EQ(ddaExchangeMaxBytes(cfg, CollType::AllToAll, 8), size_t(2) << 20);
  // LL follows the flat allreduce's size per message (2 ranks: 512 KiB).
  EXPECT_EQ(select(exchange(CollType::AllToAll, 256 << 10), cfg, gpu(2)), Algo::LL);
  EXPECT_EQ(select(exchange(CollType::AllToAll, 768 << 10), cfg, gpu(2)), Algo::Pipelined);
  Caps noLL = gpu(2);
  noLL.allow(Algo::LL, false);  // the block does not fit one LL slot
  EXPECT_EQ(select(exchange(CollType::AllToAll, 4 << 10), cfg, noLL), Algo::Pipelined);
  // The settings.
  cfg.ddaAllGatherMaxBytes = size_t(64) << 20;
  cfg.ddaReduceScatterMaxBytes = 1 << 20;
  cfg.ddaAllToAllMaxBytes = size_t(1) << 30;
  EXPECT_EQ(select(exchange(CollType::AllGather, 4 << 20), cfg, gpu(n)), Algo::Pipelined);
  EXPECT_EQ(select(exchange(CollType::ReduceScatter, 256 << 10), cfg, gpu(n)), Algo::Base);
  EXPECT_EQ(select(exchange(CollType::AllToAll, 8 << 20), cfg, gpu(n)), Algo::Pipelined);
  cfg.ddaFlatMaxBytes = 1 << 10;
  EXPECT_EQ(select(exchange(CollType::AllGather, 4 << 10), cfg, gpu(n)), Algo::Pipelined);
}

// Hints force either side; all-to-all-v has no size rule and never runs LL; bitwise
// reduce-scatter (NCCL has none) runs on DDA at any size; bad names fail on every backend.
TEST(Select, ExchangeHintsAllToAllVAndBitwise) {
  Config cfg;
  CollArgs a = exchange(CollType::AllGather, 8 << 20);  // 64 MiB at 8 ranks: NCCL by size
  EXPECT_EQ(select(a, cfg, gpu(8)), Algo::Base);
  a.opts.hints["algo"] = "dda";
  EXPECT_EQ(select(a, cfg, gpu(8)), Algo::Pipelined);
  a.opts.hints["algo"] = "flat";  // LL when it fits, else pipelined
  EXPECT_EQ(select(a, cfg, gpu(8)), Algo::LL);
  Caps noLL = gpu(8);
  noLL.allow(Algo::LL, false);
  EXPECT_EQ(select(a, cfg, noLL), Algo::Pipelined);
  a.opts.hints["algo"] = "tree";
  EXPECT_EQ(select(a, cfg, gpu(8)), Algo::Pipelined);
  CollArgs small = exchange(CollType::ReduceScatter, 1 << 10);
  small.opts.hints["algo"] = "nccl";
  EXPECT_EQ(select(small, cfg, gpu(8)), Algo::Base);
  small.opts.hints["algo"] = "lamport";  // an allreduce name: auto for the exchanges
  EXPECT_EQ(select(small, cfg, gpu(8)), Algo::LL);
  cfg.allreduceAlgo = "nccl";  // CCLX_ALLREDUCE_ALGO is about allreduce only
  small.opts.hints.clear();
  EXPECT_EQ(select(small, cfg, gpu(8)), Algo::LL);
  cfg = Config{};
  // All-to-all-v: pipelined whatever the size (the counts differ per rank), NCCL only by hint.
  CollArgs v;
  v.type = CollType::AllToAllV;
  v.dtype = DataType::f32;
  v.sendCounts = v.recvCounts = std::vector<size_t>(4, size_t(64) << 20);
  EXPECT_EQ(select(v, cfg, gpu(4)), Algo::Pipelined);
  v.opts.hints["algo"] = "flat";
  EXPECT_EQ(select(v, cfg, gpu(4)), Algo::Pipelined);
  v.opts.hints["algo"] = "nccl";
  EXPECT_EQ(select(v, cfg, gpu(4)), Algo::Base);
  Caps noPipe = gpu(4);
  noPipe.allow(Algo::Pipelined, false);  // its staging failed to allocate: NCCL
  v.opts.hints.clear();
  EXPECT_EQ(select(v, cfg, noPipe), Algo::Base);
  // All-to-all-v with device split sizes: the device-planned pipelined kernel (no size is known
  // on the host), NCCL by hint "nccl", without peer memory or pipelined staging, for backend
  // "nccl"; CPU comms their shm algorithm.
  CollArgs d;
  d.type = CollType::AllToAllVDevice;
  d.dtype = DataType::bf16;
  d.rows.rowElems = 7168;
  EXPECT_EQ(select(d, cfg, gpu(8)), Algo::Pipelined);
  d.opts.hints["algo"] = "flat";
  EXPECT_EQ(select(d, cfg, gpu(8)), Algo::Pipelined);
  d.opts.hints["algo"] = "nccl";
  EXPECT_EQ(select(d, cfg, gpu(8)), Algo::Base);
  d.opts.hints.clear();
  EXPECT_EQ(select(d, cfg, noPipe), Algo::Base);
  EXPECT_EQ(select(d, cfg, host(4)), Algo::Base);
  Caps plainD = gpu(4), noPeerD = gpu(4);
  plainD.plainNccl = true;
  noPeerD.peer = false;
  EXPECT_EQ(select(d, cfg, plainD), Algo::Base);
  EXPECT_EQ(select(d, cfg, noPeerD), Algo::Base);
  // Bitwise reduce-scatter: DDA at any size, even when asked for NCCL.
  CollArgs bw = exchange(CollType::ReduceScatter, size_t(64) << 20, DataType::i32, RedOpKind::BXOR);
  EXPECT_EQ(select(bw, cfg, gpu(8)), Algo::Pipelined);
  bw.opts.hints["algo"] = "nccl";
  EXPECT_EQ(select(bw, cfg, gpu(8)), Algo::Pipelined);
  // Bad names are argument errors for every collective and backend.
  for (CollType t : {CollType::AllGather, CollType::ReduceScatter, CollType::AllToAll,
                     CollType::AllToAllV})
    for (const Caps& k : {gpu(2), host(2)}) {
      CollArgs b = exchange(t, 1 << 10);
      b.opts.hints["algo"] = "fastest";
      try {
        (void)select(b, cfg, k);
        ADD_FAILURE() << collName(t) << " accepted algo=fastest";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), cclxInvalidArgument);
      }
    }
  // CPU comms keep their shm algorithms; backend "nccl" keeps NCCL; no peer memory, NCCL.
  EXPECT_EQ(select(exchange(CollType::AllGather, 1 << 10), cfg, host(4)), Algo::Base);
  Caps plain = gpu(4);
  plain.plainNccl = true;
  EXPECT_EQ(select(exchange(CollType::AllGather, 1 << 10), cfg, plain), Algo::Base);
  Caps noPeer = gpu(4);
  noPeer.peer = false;
  EXPECT_EQ(select(exchange(CollType::AllGather, 1 << 10), cfg, noPeer), Algo::Base);
  // HIP: auto never takes LL (LL16 packets are data as flag); a hint still does.
  Caps hip = gpu(2);
  hip.dataAsFlag = false;
  EXPECT_EQ(select(exchange(CollType::AllGather, 1 << 10), cfg, hip), Algo::Pipelined);
}

// Ranks that share a GPU: every size on DDA (LL where it fits, else pipelined).
TEST(Select, ExchangeOnASharedGpu) {
  Config cfg;
  Caps c = gpu(5);
  c.nccl = false;
  c.timed = false;
  EXPECT_EQ(select(exchange(CollType::AllGather, size_t(256) << 20), cfg, c), Algo::LL);
  c.allow(Algo::LL, false);
  for (CollType t : {CollType::AllGather, CollType::ReduceScatter, CollType::AllToAll})
    EXPECT_EQ(select(exchange(t, size_t(256) << 20), cfg, c), Algo::Pipelined) << collName(t);
  // FP8 where asked, as on GPUs of their own.
  CollArgs f = exchange(CollType::ReduceScatter, size_t(256) << 20);
  f.opts.hints["low_precision"] = "fp8";
  EXPECT_EQ(select(f, cfg, c), Algo::Fp8);
}

// Broadcast, reduce, reduce-scatter-v and the lowered collectives (scatter, gather, all-gather-v,
// all-to-all lists):
// the pipelined exchange where ranks share a GPU or NCCL is absent, or by hint; NCCL on GPUs of
// their own (not measured against it yet); batches of point-to-point messages (no plan, so no
// pipelined capability) and CPU comms keep their own paths.
TEST(Select, GroupedFormsAndReduceScatterV) {
  Config cfg;
  CollArgs g;
  g.type = CollType::SendRecv;
  g.what = "Scatter";
  g.dtype = DataType::f32;
  g.count = size_t(64) << 20;
  CollArgs rv = g;
  rv.type = CollType::ReduceScatterV;
  rv.what = nullptr;
  CollArgs bc = rv, rd = rv;
  bc.type = CollType::Broadcast;
  rd.type = CollType::Reduce;
  for (const CollArgs& a : {g, rv, bc, rd}) {
    EXPECT_EQ(select(a, cfg, gpu(4)), Algo::Base) << collName(a.type);
    Caps shared = gpu(4);
    shared.nccl = false;
    shared.timed = false;
    EXPECT_EQ(select(a, cfg, shared), Algo::Pipelined) << collName(a.type);
    Caps noNccl = gpu(4);
    noNccl.nccl = false;
    EXPECT_EQ(select(a, cfg, noNccl), Algo::Pipelined) << collName(a.type);
    for (const char* h : {"dda", "tree", "flat", "lamport"}) {
      CollArgs b = a;
      b.opts.hints["algo"] = h;
      EXPECT_EQ(select(b, cfg, gpu(4)), Algo::Pipelined) << collName(a.type) << " " << h;
    }
    CollArgs n = a;
    n.opts.hints["algo"] = "nccl";
    EXPECT_EQ(select(n, cfg, gpu(4)), Algo::Base);
    Caps noPipe = shared;
    noPipe.allow(Algo::Pipelined, false);  // no plan (a batch) or its staging failed: NCCL, which refuses it
    EXPECT_EQ(select(a, cfg, noPipe), Algo::Base);
    Caps noPeer = shared;
    noPeer.peer = false;
    EXPECT_EQ(select(a, cfg, noPeer), Algo::Base);
    EXPECT_EQ(select(a, cfg, host(4)), Algo::Base);
    Caps plain = gpu(4);
    plain.plainNccl = true;
    EXPECT_EQ(select(a, cfg, plain), Algo::Base);
    CollArgs bad = a;
    bad.opts.hints["algo"] = "fastest";
    EXPECT_THROW((void)select(bad, cfg, shared), Error);
  }
}

// A batch of point-to-point messages (SendRecv without `what`): the pipelined exchange exactly
// where the comm has no NCCL (ranks sharing a GPU), whatever the hints (both ends of a message
// must choose alike); NCCL otherwise; never on CPU comms or the plain "nccl" backend.
TEST(Select, PointToPointBatches) {
  Config cfg;
  CollArgs b;
  b.type = CollType::SendRecv;
  b.dtype = DataType::u8;
  b.count = 4097;
  Caps shared = gpu(4);
  shared.nccl = false;
  shared.timed = false;
  EXPECT_EQ(select(b, cfg, shared), Algo::Pipelined);
  EXPECT_EQ(select(b, cfg, gpu(4)), Algo::Base);
  for (const char* h : {"dda", "tree", "flat", "lamport", "nccl"}) {
    CollArgs x = b;
    x.opts.hints["algo"] = h;
    EXPECT_EQ(select(x, cfg, gpu(4)), Algo::Base) << h;
    EXPECT_EQ(select(x, cfg, shared), Algo::Pipelined) << h;
  }
  Caps noPipe = shared;
  noPipe.allow(Algo::Pipelined, false);
  EXPECT_EQ(select(b, cfg, noPipe), Algo::Base);
  Caps plain = shared;
  plain.plainNccl = true;
  EXPECT_EQ(select(b, cfg, plain), Algo::Base);
  EXPECT_EQ(select(b, cfg, host(4)), Algo::Base);
  CollArgs bad = b;
  bad.opts.hints["algo"] = "fastest";
  EXPECT_THROW((void)select(bad, cfg, shared), Error);
}

// Allreduce: "dda" is auto without NCCL.
TEST(Select, AllReduceDdaHint) {
  Config cfg;
  CollArgs a = allreduce(size_t(256) << 20);
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Base);
  a.opts.hints["algo"] = "dda";
  EXPECT_EQ(select(a, cfg, gpu(2)), Algo::Tree);
  EXPECT_EQ(select(allreduce(1 << 10), cfg, gpu(2)), Algo::Flat);
  CollArgs s = allreduce(1 << 10);
  s.opts.hints["algo"] = "dda";
  EXPECT_EQ(select(s, cfg, gpu(2)), Algo::Flat);
}

// Allreduce where the tree cannot run (on GPUs: its staging failed to allocate on some rank, and
// the call selects again): never the tree. Forced or auto, the call runs on NCCL, as the
// exchanges do; bitwise ops (no NCCL reduction) take a one-shot kernel that accepts them.
TEST(Select, AllReduceWithoutTheTree) {
  Config cfg;
  Caps c = gpu(2);
  c.allow(Algo::Tree, false);
  EXPECT_EQ(select(allreduce(size_t(32) << 20), cfg, c), Algo::Base);  // auto, tree-sized
  EXPECT_EQ(select(allreduce(4 << 10), cfg, c), Algo::Flat);  // what fits elsewhere still runs
  for (const char* h : {"tree", "flat", "lamport", "dda", "auto"}) {
    CollArgs a = allreduce(size_t(32) << 20);
    a.opts.hints["algo"] = h;
    Caps none = c;
    none.allow(Algo::Flat, false);
    none.allow(Algo::Lamport, false);  // nothing of the peers fits: NCCL
    EXPECT_EQ(select(a, cfg, none), Algo::Base) << h;
  }
  Caps shared = c;  // ranks share a GPU: no size table, no NCCL
  shared.nccl = false;
  shared.timed = false;
  shared.allow(Algo::Flat, false);
  shared.allow(Algo::Lamport, false);
  EXPECT_EQ(select(allreduce(size_t(32) << 20), cfg, shared), Algo::Base);  // "needs NCCL"
  CollArgs bw = allreduce(size_t(32) << 20, DataType::i32, RedOpKind::BOR);
  EXPECT_EQ(select(bw, cfg, c), Algo::Flat);
  Caps onlyLamport = c;
  onlyLamport.allow(Algo::Flat, false);
  EXPECT_EQ(select(bw, cfg, onlyLamport), Algo::Lamport);
  // The host's twin: its tree and flat take every call, but the rule is the same.
  Caps h = host(4);
  h.allow(Algo::Tree, false);
  EXPECT_EQ(select(allreduce(size_t(32) << 20), cfg, h), Algo::Flat);
}

// The invariant behind every rule: select() returns Base, RmsUnfused or an algorithm whose
// capability is on, for every collective, hint and capability set (sampled).
// reduce_scatter_quantized: the peer kernel where it runs, NCCL's sequence when the comm is plain
// NCCL or hint "algo" = "nccl" asks for it, the kernel whatever the hint where there is no NCCL;
// CPU comms their shm algorithm (Base). No size rule.
TEST(Select, ReduceScatterQuantized) {
  const Config cfg;
  CollArgs a = exchange(CollType::ReduceScatterQuantized, size_t(1) << 30, DataType::f32);
  Caps c = gpu(4);
  EXPECT_EQ(select(a, cfg, c), Algo::Base);  // the kernel does not accept the call
  c.allow(Algo::SrBf16, true);
  EXPECT_EQ(select(a, cfg, c), Algo::SrBf16);
  a.count = 1;
  EXPECT_EQ(select(a, cfg, c), Algo::SrBf16);
  a.opts.hints["algo"] = "nccl";
  EXPECT_EQ(select(a, cfg, c), Algo::Base);
  c.nccl = false;  // ranks sharing a GPU
  EXPECT_EQ(select(a, cfg, c), Algo::SrBf16);
  c.nccl = true;
  a.opts.hints["algo"] = "bogus";
  EXPECT_THROW((void)select(a, cfg, c), Error);
  a.opts.hints.erase("algo");
  c.plainNccl = true;
  EXPECT_EQ(select(a, cfg, c), Algo::Base);
  c.plainNccl = false;
  c.host = true;
  EXPECT_EQ(select(a, cfg, c), Algo::Base);
  EXPECT_STREQ(algoName(Algo::SrBf16), "sr_bf16");
  // The FP8 payload: only the call's hint asks for it, only where the FP8 reduce-scatter runs.
  c.host = false;
  EXPECT_EQ(select(a, cfg, c), Algo::SrBf16);  // c.fp8 without the hint
  a.opts.hints["low_precision"] = "fp8";
  EXPECT_EQ(select(a, cfg, c), Algo::Fp8);
  c.allow(Algo::Fp8, false);
  EXPECT_EQ(select(a, cfg, c), Algo::SrBf16);
  c.allow(Algo::Fp8, true);
  c.host = true;
  EXPECT_EQ(select(a, cfg, c), Algo::Fp8);
  const CollArgs b = lowerFor(a, Algo::Fp8);
  EXPECT_EQ(b.type, CollType::ReduceScatter);
  EXPECT_EQ(b.seed, nullptr);
  EXPECT_TRUE(lowPrecisionWanted(b, cfg));
}

TEST(Select, NeverAnAlgorithmThatCannotRun) {
  Config cfg;
  uint64_t x = 0x9E3779B97F4A7C15ull;
  auto next = [&x] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const CollType types[] = {CollType::AllReduce,     CollType::AllGather, CollType::ReduceScatter,
                            CollType::AllToAll,      CollType::AllToAllV, CollType::Broadcast,
                            CollType::Reduce,        CollType::ReduceScatterV, CollType::SendRecv,
                            CollType::Barrier,       CollType::AllReduceRmsNorm,
                            CollType::ReduceScatterQuantized};
  const char* algos[] = {nullptr, "auto", "flat", "lamport", "tree", "nccl", "dda", "ll", "pipelined", "base"};
  const char* fused[] = {nullptr, "auto", "oneshot", "twoshot", "unfused", "fused_oneshot", "fused_twoshot"};
  const char* fp8[] = {nullptr, "auto", "oneshot", "twoshot", "fp8", "fp8_oneshot"};
  const Algo all[] = {Algo::Flat,       Algo::Lamport,     Algo::Tree,        Algo::LL,
                      Algo::Pipelined,   Algo::Fp8,         Algo::Fp8OneShot,  Algo::PeerBarrier,
                      Algo::FusedOneShot, Algo::FusedTwoShot, Algo::SrBf16};
  for (int i = 0; i < 40000; ++i) {
    const uint64_t r = next();
    Caps c;
    c.worldSize = 2 + int(r % 7);
    c.host = r >> 3 & 1;
    c.nccl = r >> 4 & 1;
    c.plainNccl = (r >> 5 & 7) == 0;
    c.timed = r >> 8 & 1;
    c.peer = (r >> 9 & 3) != 0;
    c.dataAsFlag = r >> 11 & 1;
    for (int k = 0; k < 11; ++k) c.allow(all[k], r >> (12 + k) & 1);
    CollArgs a;
    a.type = types[(r >> 24) % 12];
    a.dtype = (r >> 28 & 3) == 0 ? DataType::i32 : DataType::f32;
    a.op = a.dtype == DataType::i32 && (r >> 30 & 1) ? RedOpKind::BAND : RedOpKind::SUM;
    a.count = size_t(1) << (r >> 31) % 28;
    if (a.type == CollType::AllToAllV) a.sendCounts = a.recvCounts = std::vector<size_t>(2, a.count);
    if (a.type == CollType::SendRecv && (r >> 36 & 1)) a.what = "Scatter";
    if (const char* h = algos[(r >> 37) % 10]) a.opts.hints["algo"] = h;
    if (const char* h = fused[(r >> 40) % 7]) a.opts.hints["fused_algo"] = h;
    if (const char* h = fp8[(r >> 43) % 6]) a.opts.hints["fp8_algo"] = h;
    if (r >> 46 & 1) a.opts.hints["low_precision"] = "fp8";
    Algo got = Algo::Base;
    ASSERT_NO_THROW(got = select(a, cfg, c)) << collName(a.type) << " draw " << i;
    ASSERT_TRUE(c.can(got)) << collName(a.type) << " picked " << algoName(got) << " draw " << i;
  }
}
