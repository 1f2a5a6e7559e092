// Algorithm selection for both backends (see select.h). Size tables: bytes per rank, measured on
// 2x H200 (docs/PERF.md, runs 13 and 16); other world sizes are estimates until measured.
#include "core/select/select.h"

#include <limits>
#include <string>

#include "base/error.h"
#include "core/settings/table.h"

namespace cclx {

namespace {

constexpr size_t kNever = 0;
constexpr size_t kAlways = std::numeric_limits<size_t>::max();

size_t flatTable(int n) { return n <= 2 ? (512u << 10) : n <= 4 ? (256u << 10) : (128u << 10); }
// Lamport one-shot: measured on 2 ranks only; larger worlds push (N - 1) x the message per rank
// and use the tree unless CCLX_DDA_LAMPORT_MAX_BYTES says otherwise.
size_t lamportTable(int n) { return n <= 2 ? (16u << 20) : kNever; }
size_t treeTable(int n) { return n <= 2 ? (64u << 20) : n <= 4 ? (16u << 20) : (8u << 20); }
// FP8 one-shot against two-shot, 2 ranks: faster up to 32 MiB, equal at 48, slower at 64. Other
// world sizes push N - 1 copies of the message; not measured.
size_t fp8OneShotTable(int n) { return n == 2 ? (size_t(32) << 20) : kNever; }

// The exchange collectives on DDA, in bytes of a rank's larger buffer: RCCLX's limits (measured
// there with 8 ranks) until cclx-perf retunes them on a multi-GPU host.
size_t exchangeTable(CollType t, int n) {
  (void)n;
  switch (t) {
    case CollType::AllGather: return size_t(16) << 20;
    case CollType::ReduceScatter: return size_t(8) << 20;
    case CollType::AllToAll: return size_t(2) << 20;
    default: return kNever;
  }
}
// Fused allreduce + RMSNorm, bytes = tokens x hidden x element size. Start: TensorRT-LLM's SM90
// tables (TP 8, hidden 4096: one-shot to 32 tokens = 256 KiB, two-shot to 512 tokens = 4 MiB;
// TP 2: one-shot to 8 MiB) and vLLM's fusion caps ({2: 64, 4: 2, 8: 0.5} MiB); not yet measured
// on cclx's kernels. With 2 ranks the two-shot moves more than the one-shot (r and y travel
// back), so above the one-shot the unfused sequence runs.
size_t fusedOneShotTable(int n) {
  return n <= 2 ? (size_t(8) << 20) : n <= 4 ? (size_t(512) << 10) : (size_t(256) << 10);
}
size_t fusedTwoShotTable(int n) { return n <= 2 ? kNever : (size_t(4) << 20); }

size_t pick(size_t setting, size_t table) { return setting ? setting : table; }

// A value of hint `key` (or its setting) that none of the rules below takes: the valid ones are
// the table's (core/settings/table.cc), which holds every hint key and its values.
[[noreturn]] void badValue(const char* what, const char* key, const std::string& w) {
  CCLX_THROW(cclxInvalidArgument, "%s '%s' is not %s", what, w.c_str(),
             settings::validText(*settings::findHint(key)).c_str());
}

const std::string* hint(const CollArgs& a, const char* key) {
  auto it = a.opts.hints.find(key);
  return it == a.opts.hints.end() ? nullptr : &it->second;
}

enum class Want { Auto, Flat, Lamport, Tree, Nccl, Dda };

// A value of hint "algo" (or CCLX_ALLREDUCE_ALGO). "dda": the direct-access kernels at any size.
Want parseWant(const std::string& w) {
  if (w == "auto") return Want::Auto;
  if (w == "flat") return Want::Flat;
  if (w == "lamport") return Want::Lamport;
  if (w == "tree") return Want::Tree;
  if (w == "nccl") return Want::Nccl;
  if (w == "dda") return Want::Dda;
  badValue("algorithm", "algo", w);
}

// Hint "algo" (per call, else per comm: Comm merges them), else CCLX_ALLREDUCE_ALGO.
Want allReduceWant(const CollArgs& a, const Config& cfg) {
  const std::string* h = hint(a, "algo");
  return parseWant(h ? *h : cfg.allreduceAlgo);
}

// Hint "fp8_algo", else CCLX_FP8_ALLREDUCE_ALGO: true for one-shot (auto: only with dataAsFlag).
bool fp8OneShotWanted(const CollArgs& a, const Config& cfg, const Caps& c) {
  const std::string* h = hint(a, "fp8_algo");
  const std::string& w = h ? *h : cfg.fp8AllReduceAlgo;
  if (w == "oneshot") return true;
  if (w == "twoshot") return false;
  if (w != "auto") badValue("fp8 allreduce algorithm", "fp8_algo", w);
  return c.dataAsFlag && a.bytes() <= fp8OneShotMaxBytes(cfg, c.worldSize);
}

bool isBitwise(RedOpKind k) {
  return k == RedOpKind::BAND || k == RedOpKind::BOR || k == RedOpKind::BXOR;
}

enum class Fused { Auto, OneShot, TwoShot, Unfused };

// Hint "fused_algo", else CCLX_FUSED_ALGO.
Fused fusedWant(const CollArgs& a, const Config& cfg) {
  const std::string* h = hint(a, "fused_algo");
  const std::string& w = h ? *h : cfg.fusedAlgo;
  if (w == "auto") return Fused::Auto;
  if (w == "oneshot") return Fused::OneShot;
  if (w == "twoshot") return Fused::TwoShot;
  if (w == "unfused") return Fused::Unfused;
  badValue("fused allreduce + RMSNorm algorithm", "fused_algo", w);
}

// Fused allreduce + RMSNorm. Forced: one-shot (two-shot where it does not fit, else unfused),
// two-shot (else unfused), unfused. Auto: CPU comms one-shot up to CCLX_SHM_FLAT_MAX_BYTES,
// two-shot above (where a row fits the step slots); GPU comms by the table (every size where ranks
// share a GPU), never the data-as-flag kernels where they are not known to be safe.
Algo selectRmsNorm(const CollArgs& a, const Config& cfg, const Caps& c) {
  const Fused want = fusedWant(a, cfg);
  (void)allReduceWant(a, cfg);  // a bad "algo" fails whatever runs
  const Algo one = c.rmsOneShot ? Algo::RmsOneShot : c.rmsTwoShot ? Algo::RmsTwoShot : Algo::RmsUnfused;
  const Algo two = c.rmsTwoShot ? Algo::RmsTwoShot : Algo::RmsUnfused;
  const size_t bytes = a.bytes();
  if (c.host) {
    if (want == Fused::OneShot) return one;
    if (want == Fused::TwoShot) return two;
    if (want == Fused::Unfused) return Algo::RmsUnfused;
    return bytes <= cfg.shmFlatMaxBytes ? one : two;
  }
  if (!c.peer || c.plainNccl) return Algo::Base;  // NCCL allreduce + the local norm kernel
  switch (want) {
    case Fused::OneShot: return one;
    case Fused::TwoShot: return two;
    case Fused::Unfused: return Algo::RmsUnfused;
    case Fused::Auto: break;
  }
  if (!c.dataAsFlag) return Algo::RmsUnfused;
  const size_t oneMax = c.timed ? fusedOneShotMaxBytes(cfg, c.worldSize) : kAlways;
  const size_t twoMax = c.timed ? fusedTwoShotMaxBytes(cfg, c.worldSize) : kAlways;
  if (bytes <= oneMax && c.rmsOneShot) return Algo::RmsOneShot;
  if (bytes <= twoMax && c.rmsTwoShot) return Algo::RmsTwoShot;
  return Algo::RmsUnfused;
}

Algo selectAllReduce(const CollArgs& a, const Config& cfg, const Caps& c) {
  const Want want = allReduceWant(a, cfg);  // a bad name fails whatever runs
  const bool bitwise = isBitwise(a.op.kind);
  if (!c.plainNccl && !bitwise && lowPrecisionWanted(a, cfg)) {
    // A one-shot call that does not fit the one-shot inboxes runs two-shot.
    if (c.fp8OneShot && fp8OneShotWanted(a, cfg, c)) return Algo::Fp8OneShot;
    if (c.fp8) return Algo::Fp8;
  }
  const size_t bytes = a.bytes();
  // Where the tree cannot run (on GPUs: its staging failed to allocate on some rank) a call that
  // would take it runs on NCCL, as the exchanges do; bitwise ops, which NCCL lacks, take a
  // one-shot kernel that accepts the call, else NCCL refuses them naming why.
  const Algo flat = c.flat ? Algo::Flat : Algo::Base;
  const Algo tree = c.tree                   ? Algo::Tree
                    : bitwise && c.flat      ? Algo::Flat
                    : bitwise && c.lamport   ? Algo::Lamport
                                             : Algo::Base;
  if (c.host) {
    if (want == Want::Flat) return c.flat ? Algo::Flat : tree;
    if (want == Want::Tree) return tree;
    if (want == Want::Lamport) return c.lamport ? Algo::Lamport : tree;
    return bytes <= cfg.shmFlatMaxBytes && c.flat ? Algo::Flat : c.tree ? Algo::Tree : flat;
  }
  if (!c.peer || (c.plainNccl && !bitwise)) return Algo::Base;
  const size_t flatMax = c.timed ? ddaFlatMaxBytes(cfg, c.worldSize) : kAlways;
  const size_t lamportMax = c.timed ? ddaLamportMaxBytes(cfg, c.worldSize) : kAlways;
  const size_t treeMax = c.timed ? ddaTreeMaxBytes(cfg, c.worldSize) : kAlways;
  switch (want) {
    case Want::Flat: return c.flat ? Algo::Flat : tree;
    case Want::Lamport: return c.lamport ? Algo::Lamport : tree;
    case Want::Tree: return tree;
    case Want::Nccl:
      if (!bitwise) return Algo::Base;
      break;
    case Want::Auto:
    case Want::Dda: break;
  }
  if (bytes <= flatMax && c.flat && c.dataAsFlag) return Algo::Flat;
  if (bytes <= lamportMax && c.lamport && c.dataAsFlag) return Algo::Lamport;
  if (bytes <= treeMax || bitwise || !c.nccl || want == Want::Dda) return tree;
  return Algo::Base;
}

// All-gather, reduce-scatter, all-to-all(-v): FP8 where low precision asks; CPU comms their shm
// algorithm; GPU comms the DDA exchange (LL up to the flat allreduce's size per message where it
// fits, pipelined above) up to the collective's size, NCCL above. Hint "algo": flat = LL (when it
// fits), tree = pipelined, dda = either at any size, nccl = NCCL; CCLX_ALLREDUCE_ALGO does not
// apply. All-to-all-v never runs LL and has no size rule (its sizes differ per rank). Where the
// pipelined exchange cannot run (its staging failed), NCCL.
Algo selectExchange(const CollArgs& a, const Config& cfg, const Caps& c) {
  const std::string* h = hint(a, "algo");
  const Want want = h ? parseWant(*h) : Want::Auto;  // a bad name fails whatever runs
  const bool bitwise = a.type == CollType::ReduceScatter && isBitwise(a.op.kind);
  if (!c.plainNccl && !bitwise && c.fp8 && lowPrecisionWanted(a, cfg)) return Algo::Fp8;
  if (c.host || !c.peer || (c.plainNccl && !bitwise)) return Algo::Base;
  const bool v = a.type == CollType::AllToAllV;
  const Algo pipelined = c.pipelined ? Algo::XchgPipe : Algo::Base;
  switch (want) {
    case Want::Flat: return c.ll && !v ? Algo::XchgLL : pipelined;
    case Want::Tree: return pipelined;
    case Want::Nccl:
      if (!bitwise) return Algo::Base;
      break;
    case Want::Auto:
    case Want::Lamport:
    case Want::Dda: break;
  }
  const size_t bytes = a.bytes();  // one message
  const size_t measure = bytes * size_t(c.worldSize);
  const bool dda = !c.timed || !c.nccl || bitwise || v || want == Want::Dda ||
                   measure <= ddaExchangeMaxBytes(cfg, a.type, c.worldSize);
  if (!dda) return Algo::Base;
  const size_t llMax = c.timed ? ddaFlatMaxBytes(cfg, c.worldSize) : kAlways;
  if (!v && c.ll && c.dataAsFlag && bytes <= llMax) return Algo::XchgLL;
  return pipelined;
}

// Broadcast, reduce, reduce-scatter-v and the collectives lowered onto grouped messages (scatter,
// gather, all-gather-v, all-to-all lists): the pipelined exchange where NCCL cannot run them
// (ranks sharing a GPU, no NCCL) or when a hint asks for a peer algorithm (any of flat, lamport,
// tree, dda); NCCL otherwise: their speed against NCCL on GPUs of their own is not measured yet.
// A batch of point-to-point messages (SendRecv without `what`) runs on the pipelined exchange
// only where there is no NCCL, whatever the hints: both ends of a message must choose alike, and
// a hint is a per-call, per-rank setting.
Algo selectGrouped(const CollArgs& a, const Caps& c) {
  const std::string* h = hint(a, "algo");
  const Want want = h ? parseWant(*h) : Want::Auto;
  if (a.type == CollType::SendRecv && !a.what)
    return !c.host && c.peer && c.pipelined && !c.plainNccl && !c.nccl ? Algo::XchgPipe : Algo::Base;
  if (c.host || !c.peer || !c.pipelined || c.plainNccl || want == Want::Nccl) return Algo::Base;
  if (want != Want::Auto || !c.timed || !c.nccl) return Algo::XchgPipe;
  return Algo::Base;
}

// reduce_scatter_quantized: hint "low_precision" = "fp8" asks for the FP8 payload: the FP8
// reduce-scatter (Fp8, on the call quantizedAsFp8 makes) where it accepts the call, else the bf16
// path below (the settings CCLX_LOW_PRECISION_* do not apply: the call itself chose its payload).
// bf16: CPU comms their shm algorithm (Base); GPU comms the peer-memory kernel wherever it runs,
// unless the comm is plain NCCL or hint "algo" = "nccl" asks for the NCCL sequence (which needs
// NCCL: without it, ranks sharing a GPU, the kernel runs whatever the hint). No size rule: the
// NCCL sequence moves the same bytes plus a local pass, and is not measured.
Algo selectQuantized(const CollArgs& a, const Caps& c) {
  const std::string* h = hint(a, "algo");
  const Want want = h ? parseWant(*h) : Want::Auto;  // a bad name fails whatever runs
  const std::string* lp = hint(a, "low_precision");
  if (lp && *lp == "fp8" && c.fp8 && !c.plainNccl) return Algo::Fp8;
  if (c.host || !c.srBf16) return Algo::Base;
  if (!c.nccl) return Algo::SrBf16;
  return c.plainNccl || want == Want::Nccl ? Algo::Base : Algo::SrBf16;
}

// All-to-all-v of split sizes where the data is (all_to_all_v_device): the counts are not known
// on the host, so there is no size rule and every rank chooses alike from the comm's facts and
// the hints. GPU comms: the pipelined exchange planned on the device (any size, no host
// synchronization, capturable) wherever it runs; NCCL (the counts copied to the host first: the
// call synchronizes its stream) without peer memory, where its staging failed, on backend "nccl"
// or when hint "algo" = "nccl". CPU comms: the shm algorithm.
Algo selectDeviceV(const CollArgs& a, const Caps& c) {
  const std::string* h = hint(a, "algo");
  const Want want = h ? parseWant(*h) : Want::Auto;  // a bad name fails whatever runs
  if (c.host || !c.peer || !c.pipelined || c.plainNccl || want == Want::Nccl) return Algo::Base;
  return Algo::XchgPipe;
}

}  // namespace

std::vector<std::string> hintKeys() { return settings::hintKeys(); }

CollArgs quantizedAsFp8(const CollArgs& a) {
  CollArgs b = a;
  b.type = CollType::ReduceScatter;
  b.seed = nullptr;
  b.what = "reduce_scatter_quantized";
  b.opts.hints["low_precision"] = "fp8";
  return b;
}

void checkHints(const std::map<std::string, std::string>& hints) { settings::checkHints(hints); }

const char* algoName(Algo a) {
  switch (a) {
    case Algo::Base: return "base";
    case Algo::Flat: return "flat";
    case Algo::Lamport: return "lamport";
    case Algo::Tree: return "tree";
    case Algo::XchgLL: return "ll";
    case Algo::XchgPipe: return "pipelined";
    case Algo::Fp8: return "fp8";
    case Algo::Fp8OneShot: return "fp8_oneshot";
    case Algo::PeerBarrier: return "peer-barrier";
    case Algo::RmsOneShot: return "fused_oneshot";
    case Algo::RmsTwoShot: return "fused_twoshot";
    case Algo::RmsUnfused: return "unfused";
    case Algo::SrBf16: return "sr_bf16";
  }
  return "?";
}

size_t ddaFlatMaxBytes(const Config& cfg, int n) { return pick(cfg.ddaFlatMaxBytes, flatTable(n)); }
size_t ddaLamportMaxBytes(const Config& cfg, int n) {
  return pick(cfg.ddaLamportMaxBytes, lamportTable(n));
}
size_t ddaTreeMaxBytes(const Config& cfg, int n) { return pick(cfg.ddaTreeMaxBytes, treeTable(n)); }
size_t fp8OneShotMaxBytes(const Config& cfg, int n) {
  return pick(cfg.fp8OneShotMaxBytes, fp8OneShotTable(n));
}
size_t ddaExchangeMaxBytes(const Config& cfg, CollType t, int n) {
  switch (t) {
    case CollType::AllGather: return pick(cfg.ddaAllGatherMaxBytes, exchangeTable(t, n));
    case CollType::ReduceScatter: return pick(cfg.ddaReduceScatterMaxBytes, exchangeTable(t, n));
    case CollType::AllToAll: return pick(cfg.ddaAllToAllMaxBytes, exchangeTable(t, n));
    default: return kNever;
  }
}
size_t fusedOneShotMaxBytes(const Config& cfg, int n) {
  return pick(cfg.fusedOneShotMaxBytes, fusedOneShotTable(n));
}
size_t fusedTwoShotMaxBytes(const Config& cfg, int n) {
  return pick(cfg.fusedTwoShotMaxBytes, fusedTwoShotTable(n));
}

bool lowPrecisionWanted(const CollArgs& a, const Config& cfg) {
  bool enabled = false;
  switch (a.type) {
    case CollType::AllReduce: enabled = cfg.lpAllReduce; break;
    case CollType::AllGather: enabled = cfg.lpAllGather; break;
    case CollType::ReduceScatter: enabled = cfg.lpReduceScatter; break;
    case CollType::AllToAll: enabled = cfg.lpAllToAll; break;
    default: return false;
  }
  if (a.dtype != DataType::f32 && a.dtype != DataType::bf16 && a.dtype != DataType::f16)
    return false;
  if ((a.type == CollType::AllReduce || a.type == CollType::ReduceScatter) &&
      a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG)
    return false;
  if (const std::string* h = hint(a, "low_precision")) {
    if (*h == "fp8") return true;
    if (*h == "off") return false;
  }
  return enabled && a.bytes() >= cfg.lpMinBytes;
}

bool Caps::can(Algo a) const {
  switch (a) {
    case Algo::Base:
    case Algo::RmsUnfused: return true;
    case Algo::Flat: return flat;
    case Algo::Lamport: return lamport;
    case Algo::Tree: return tree;
    case Algo::XchgLL: return ll;
    case Algo::XchgPipe: return pipelined;
    case Algo::Fp8: return fp8;
    case Algo::Fp8OneShot: return fp8OneShot;
    case Algo::PeerBarrier: return peerBarrier;
    case Algo::RmsOneShot: return rmsOneShot;
    case Algo::RmsTwoShot: return rmsTwoShot;
    case Algo::SrBf16: return srBf16;
  }
  return false;
}

void Caps::allow(Algo a, bool on) {
  switch (a) {
    case Algo::Base:
    case Algo::RmsUnfused: break;
    case Algo::Flat: flat = on; break;
    case Algo::Lamport: lamport = on; break;
    case Algo::Tree: tree = on; break;
    case Algo::XchgLL: ll = on; break;
    case Algo::XchgPipe: pipelined = on; break;
    case Algo::Fp8: fp8 = on; break;
    case Algo::Fp8OneShot: fp8OneShot = on; break;
    case Algo::PeerBarrier: peerBarrier = on; break;
    case Algo::RmsOneShot: rmsOneShot = on; break;
    case Algo::RmsTwoShot: rmsTwoShot = on; break;
    case Algo::SrBf16: srBf16 = on; break;
  }
}

namespace {

Algo selectFor(const CollArgs& a, const Config& cfg, const Caps& c) {
  switch (a.type) {
    case CollType::AllReduce: return selectAllReduce(a, cfg, c);
    case CollType::AllGather:
    case CollType::ReduceScatter:
    case CollType::AllToAll:
    case CollType::AllToAllV: return selectExchange(a, cfg, c);
    case CollType::Broadcast:
    case CollType::Reduce:
    case CollType::ReduceScatterV:
    case CollType::SendRecv: return selectGrouped(a, c);
    case CollType::Barrier: return c.peerBarrier && !c.plainNccl ? Algo::PeerBarrier : Algo::Base;
    case CollType::AllReduceRmsNorm: return selectRmsNorm(a, cfg, c);
    case CollType::ReduceScatterQuantized: return selectQuantized(a, c);
    case CollType::AllToAllVDevice: return selectDeviceV(a, c);
    default: return Algo::Base;
  }
}

}  // namespace

namespace {
thread_local const char* tlsSelected = nullptr;  // takeSelectedAlgo()
}  // namespace

const char* takeSelectedAlgo() {
  const char* s = tlsSelected;
  tlsSelected = nullptr;
  return s;
}

Algo select(const CollArgs& a, const Config& cfg, const Caps& c) {
  const Algo algo = selectFor(a, cfg, c);
  tlsSelected = algoName(algo);
  // The rules above only pick what their capability allows; a rule that did not would launch a
  // kernel that cannot run (or whose staging is missing): refused here, before anything runs.
  CCLX_REQUIRE(c.can(algo), cclxInternalError, "%s: the selection picked '%s', which cannot run "
               "this call on this comm", collName(a.type), algoName(algo));
  return algo;
}

}  // namespace cclx
