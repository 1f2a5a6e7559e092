// Algorithm selection for both backends (see select.h): the hint rules and the order in which
// auto tries the catalogue's rows; their size ranges are the rows' (algorithms.def).
#include "core/select/select.h"

#include <string>

#include "base/error.h"
#include "core/settings/table.h"

namespace cclx {

namespace {

const std::string* hint(const CollArgs& a, const char* key) {
  auto it = a.opts.hints.find(key);
  return it == a.opts.hints.end() ? nullptr : &it->second;
}

// Hint `key` (per call, else per comm: Comm merges them), else its setting `setting`, resolved
// for collective `t` (algorithms.h: a policy, or the row the value names for `t`).
HintChoice want(const CollArgs& a, const char* key, const std::string& setting, CollType t) {
  const std::string* h = hint(a, key);
  return resolveHint(key, h ? *h : setting, t);
}

// Hint "algo" of a collective other than allreduce (CCLX_ALLREDUCE_ALGO does not apply).
HintChoice algoHint(const CollArgs& a) { return want(a, "algo", "auto", a.type); }

bool asks(const HintChoice& w, Algo algo) { return w.kind == HintChoice::Row && w.algo == algo; }

// Auto may pick `algo` for `bytes`: within its range (every size where the tables do not apply:
// `timed` false) and, for a kDataAsFlag row, where such kernels are known to be safe.
bool autoFits(Algo algo, size_t bytes, const Config& cfg, const Caps& c, bool timed) {
  if ((row(algo).flags & kDataAsFlag) && !c.dataAsFlag) return false;
  return !timed || bytes <= autoMaxBytes(algo, cfg, c.worldSize);
}
bool autoFits(Algo algo, size_t bytes, const Config& cfg, const Caps& c) {
  return autoFits(algo, bytes, cfg, c, c.timed);
}

// FP8 allreduce: one-shot when hint "fp8_algo" (else CCLX_FP8_ALLREDUCE_ALGO) names it, or auto
// within its range (its table applies where ranks share a GPU too).
bool fp8OneShotWanted(const CollArgs& a, const Config& cfg, const Caps& c) {
  const HintChoice w = want(a, "fp8_algo", cfg.fp8AllReduceAlgo, CollType::AllReduce);
  if (w.kind == HintChoice::Row) return w.algo == Algo::Fp8OneShot;
  return autoFits(Algo::Fp8OneShot, a.bytes(), cfg, c, /*timed=*/true);
}

// Fused allreduce + RMSNorm. Forced: one-shot (two-shot where it does not fit, else unfused),
// two-shot (else unfused), unfused. Auto: CPU comms one-shot up to CCLX_SHM_FLAT_MAX_BYTES,
// two-shot above (where a row fits the step slots); GPU comms by the rows' ranges (every size
// where ranks share a GPU), never the data-as-flag kernels where they are not known to be safe.
Algo selectRmsNorm(const CollArgs& a, const Config& cfg, const Caps& c) {
  const HintChoice w = want(a, "fused_algo", cfg.fusedAlgo, a.type);
  (void)want(a, "algo", cfg.allreduceAlgo, CollType::AllReduce);  // a bad "algo" fails whatever runs
  const Algo one = c.can(Algo::FusedOneShot)   ? Algo::FusedOneShot
                   : c.can(Algo::FusedTwoShot) ? Algo::FusedTwoShot
                                               : Algo::Unfused;
  const Algo two = c.can(Algo::FusedTwoShot) ? Algo::FusedTwoShot : Algo::Unfused;
  const bool forced = w.kind == HintChoice::Row;
  const size_t bytes = a.bytes();
  if (c.host) {
    if (forced) return w.algo == Algo::FusedOneShot ? one : w.algo == Algo::FusedTwoShot ? two : Algo::Unfused;
    return bytes <= cfg.shmFlatMaxBytes ? one : two;
  }
  if (!c.peer || c.plainNccl) return Algo::Base;  // NCCL allreduce + the local norm kernel
  if (forced) return w.algo == Algo::FusedOneShot ? one : w.algo == Algo::FusedTwoShot ? two : Algo::Unfused;
  if (!c.dataAsFlag) return Algo::Unfused;
  for (Algo f : {Algo::FusedOneShot, Algo::FusedTwoShot})
    if (c.can(f) && autoFits(f, bytes, cfg, c)) return f;
  return Algo::Unfused;
}

Algo selectAllReduce(const CollArgs& a, const Config& cfg, const Caps& c) {
  const HintChoice w = want(a, "algo", cfg.allreduceAlgo, a.type);  // a bad name fails whatever runs
  const bool bitwise = isBitwise(a.op.kind);
  if (!c.plainNccl && !bitwise && lowPrecisionWanted(a, cfg)) {
    // A one-shot call that does not fit the one-shot inboxes runs two-shot.
    if (c.can(Algo::Fp8OneShot) && fp8OneShotWanted(a, cfg, c)) return Algo::Fp8OneShot;
    if (c.can(Algo::Fp8)) return Algo::Fp8;
  }
  const size_t bytes = a.bytes();
  // Where the tree cannot run (on GPUs: its staging failed to allocate on some rank) a call that
  // would take it runs on NCCL, as the exchanges do; bitwise ops, which NCCL lacks, take a
  // one-shot kernel that accepts the call, else NCCL refuses them naming why.
  const Algo flat = c.can(Algo::Flat) ? Algo::Flat : Algo::Base;
  const Algo tree = c.can(Algo::Tree)               ? Algo::Tree
                    : bitwise && c.can(Algo::Flat)    ? Algo::Flat
                    : bitwise && c.can(Algo::Lamport) ? Algo::Lamport
                                                      : Algo::Base;
  // Forced: the row asked for where it accepts the call, else the tree.
  auto forced = [&](Algo f) { return f == Algo::Tree || !c.can(f) ? tree : f; };
  const bool named = asks(w, Algo::Flat) || asks(w, Algo::Lamport) || asks(w, Algo::Tree);
  if (c.host) {
    if (named) return forced(w.algo);
    return bytes <= cfg.shmFlatMaxBytes && c.can(Algo::Flat) ? Algo::Flat
           : c.can(Algo::Tree)                              ? Algo::Tree
                                                            : flat;
  }
  if (!c.peer || (c.plainNccl && !bitwise)) return Algo::Base;
  if (named) return forced(w.algo);
  if (asks(w, Algo::Base) && !bitwise) return Algo::Base;
  for (Algo f : {Algo::Flat, Algo::Lamport})
    if (c.can(f) && autoFits(f, bytes, cfg, c)) return f;
  if (autoFits(Algo::Tree, bytes, cfg, c) || bitwise || !c.nccl ||
      w.kind == HintChoice::AnyKernel)
    return tree;
  return Algo::Base;
}

// All-gather, reduce-scatter, all-to-all(-v): FP8 where low precision asks; CPU comms their shm
// algorithm; GPU comms the DDA exchange (LL up to the flat allreduce's size per message where it
// fits, pipelined above) up to the collective's size, NCCL above. Hint "algo": ll (alias flat,
// where it fits), pipelined (alias tree), dda = either at any size, base (alias nccl) = NCCL;
// CCLX_ALLREDUCE_ALGO does not apply. All-to-all-v never runs LL and has no size rule (its sizes
// differ per rank). Where the pipelined exchange cannot run (its staging failed), NCCL.
Algo selectExchange(const CollArgs& a, const Config& cfg, const Caps& c) {
  const HintChoice w = algoHint(a);  // a bad name fails whatever runs
  const bool bitwise = a.type == CollType::ReduceScatter && isBitwise(a.op.kind);
  if (!c.plainNccl && !bitwise && c.can(Algo::Fp8) && lowPrecisionWanted(a, cfg)) return Algo::Fp8;
  if (c.host || !c.peer || (c.plainNccl && !bitwise)) return Algo::Base;
  const bool v = a.type == CollType::AllToAllV;
  const Algo pipelined = c.can(Algo::Pipelined) ? Algo::Pipelined : Algo::Base;
  if (asks(w, Algo::LL)) return c.can(Algo::LL) ? Algo::LL : pipelined;
  if (asks(w, Algo::Pipelined)) return pipelined;
  if (asks(w, Algo::Base) && !bitwise) return Algo::Base;
  const size_t bytes = a.bytes();  // one message
  const size_t measure = bytes * size_t(c.worldSize);
  const bool dda = !c.timed || !c.nccl || bitwise || v || w.kind == HintChoice::AnyKernel ||
                   measure <= ddaExchangeMaxBytes(cfg, a.type, c.worldSize);
  if (!dda) return Algo::Base;
  if (!v && c.can(Algo::LL) && autoFits(Algo::LL, bytes, cfg, c)) return Algo::LL;
  return pipelined;
}

// Broadcast, reduce, reduce-scatter-v and the collectives lowered onto grouped messages (scatter,
// gather, all-gather-v, all-to-all lists): the pipelined exchange where NCCL cannot run them
// (ranks sharing a GPU, no NCCL) or when hint "algo" names a peer algorithm (any row but base, or
// dda); NCCL otherwise: their speed against NCCL on GPUs of their own is not measured yet.
// A batch of point-to-point messages (SendRecv without `what`) runs on the pipelined exchange
// only where there is no NCCL, whatever the hints: both ends of a message must choose alike, and
// a hint is a per-call, per-rank setting.
Algo selectGrouped(const CollArgs& a, const Caps& c) {
  const HintChoice w = algoHint(a);
  const bool pipe = c.can(Algo::Pipelined);
  if (a.type == CollType::SendRecv && !a.what)
    return !c.host && c.peer && pipe && !c.plainNccl && !c.nccl ? Algo::Pipelined : Algo::Base;
  if (c.host || !c.peer || !pipe || c.plainNccl || asks(w, Algo::Base)) return Algo::Base;
  const bool peerAsked = w.kind != HintChoice::Auto || w.named;
  if (peerAsked || !c.timed || !c.nccl) return Algo::Pipelined;
  return Algo::Base;
}

// reduce_scatter_quantized: hint "low_precision" = "fp8" asks for the FP8 payload: the FP8
// reduce-scatter (Fp8, on the call lowerFor makes) where it accepts the call, else the bf16
// path below (the settings CCLX_LOW_PRECISION_* do not apply: the call itself chose its payload).
// bf16: CPU comms their shm algorithm (Base); GPU comms the peer-memory kernel wherever it runs,
// unless the comm is plain NCCL or hint "algo" = "base" (alias nccl) asks for the NCCL sequence
// (which needs NCCL: without it, ranks sharing a GPU, the kernel runs whatever the hint). No
// size rule: the NCCL sequence moves the same bytes plus a local pass, and is not measured.
Algo selectQuantized(const CollArgs& a, const Caps& c) {
  const HintChoice w = algoHint(a);  // a bad name fails whatever runs
  const std::string* lp = hint(a, "low_precision");
  if (lp && *lp == "fp8" && c.can(Algo::Fp8) && !c.plainNccl) return Algo::Fp8;
  if (c.host || !c.can(Algo::SrBf16)) return Algo::Base;
  if (!c.nccl) return Algo::SrBf16;
  return c.plainNccl || asks(w, Algo::Base) ? Algo::Base : Algo::SrBf16;
}

// All-to-all-v of split sizes where the data is (all_to_all_v_device): the counts are not known
// on the host, so there is no size rule and every rank chooses alike from the comm's facts and
// the hints. GPU comms: the pipelined exchange planned on the device (any size, no host
// synchronization, capturable) wherever it runs; NCCL (the counts copied to the host first: the
// call synchronizes its stream) without peer memory, where its staging failed, on backend "nccl"
// or when hint "algo" = "base" (alias nccl). CPU comms: the shm algorithm.
Algo selectDeviceV(const CollArgs& a, const Caps& c) {
  const HintChoice w = algoHint(a);  // a bad name fails whatever runs
  if (c.host || !c.peer || !c.can(Algo::Pipelined) || c.plainNccl || asks(w, Algo::Base))
    return Algo::Base;
  return Algo::Pipelined;
}

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
    case CollType::Barrier:
      return c.can(Algo::PeerBarrier) && !c.plainNccl ? Algo::PeerBarrier : Algo::Base;
    case CollType::AllReduceRmsNorm: return selectRmsNorm(a, cfg, c);
    case CollType::ReduceScatterQuantized: return selectQuantized(a, c);
    case CollType::AllToAllVDevice: return selectDeviceV(a, c);
    default: return Algo::Base;
  }
}

}  // namespace

CollArgs lowerFor(const CollArgs& a, Algo algo) {
  if (runsAs(a.type, algo) == a.type) return a;
  CollArgs b = a;
  b.type = runsAs(a.type, algo);
  b.seed = nullptr;
  b.what = "reduce_scatter_quantized";
  b.opts.hints["low_precision"] = "fp8";
  return b;
}

void checkHints(const std::map<std::string, std::string>& hints) { settings::checkHints(hints); }

size_t ddaExchangeMaxBytes(const Config& cfg, CollType t, int n) {
  (void)n;  // one size for every world size until measured per size
  const CollTraits& c = traits(t);
  if (!c.ddaMax) return 0;
  return cfg.*c.ddaMax ? cfg.*c.ddaMax : c.ddaMaxDefault;
}

bool lowPrecisionWanted(const CollArgs& a, const Config& cfg) {
  const CollTraits& t = traits(a.type);
  if (!t.lowPrecision) return false;
  const bool enabled = cfg.*t.lowPrecision;
  if (a.dtype != DataType::f32 && a.dtype != DataType::bf16 && a.dtype != DataType::f16)
    return false;
  if (t.reduction && a.op.kind != RedOpKind::SUM && a.op.kind != RedOpKind::AVG) return false;
  if (const std::string* h = hint(a, "low_precision")) {
    if (*h == "fp8") return true;
    if (*h == "off") return false;
  }
  return enabled && a.bytes() >= cfg.lpMinBytes;
}

Algo select(const CollArgs& a, const Config& cfg, const Caps& c) {
  const Algo algo = selectFor(a, cfg, c);
  // The rules above only pick what their capability allows; a rule that did not would launch a
  // kernel that cannot run (or whose staging is missing): refused here, before anything runs.
  CCLX_REQUIRE(c.can(algo), cclxInternalError, "%s: the selection picked '%s', which cannot run "
               "this call on this comm", collName(a.type), algoName(algo));
  return algo;
}

}  // namespace cclx
