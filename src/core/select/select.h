// src/core/select: algorithm selection: the one place that holds every size table and hint rule. Both backends
// (host shared memory, GPU) call select() once per call with what their algorithms can run for
// these arguments (Caps), and run the algorithm it returns. docs/design/selection.md
// has the table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/comm/backend.h"

namespace cclx {

enum class Algo : uint8_t {
  Base,        // the backend's full-precision path: NCCL on GPUs, the shm algorithm on CPUs
  Flat,        // allreduce: one step over every rank's copy (DDA flat / shm flat)
  Lamport,     // allreduce: one shot, the data as its own flag (DDA Lamport / shm twin)
  Tree,        // allreduce: reduce-scatter + all-gather (DDA tree / shm tree)
  XchgLL,      // all-gather, reduce-scatter, all-to-all: the DDA LL exchange (one shot, LL16
               // slots; hint "algo"="flat" asks for it)
  XchgPipe,    // all-gather, reduce-scatter, all-to-all(-v), reduce-scatter-v, broadcast, reduce,
               // the grouped forms: the DDA pipelined exchange, any size (hint "algo"="tree")
  Fp8,         // FP8: two-shot allreduce, or the all-gather / reduce-scatter / all-to-all
  Fp8OneShot,  // FP8 one-shot allreduce (one quantization)
  PeerBarrier, // barrier: the peer-memory barrier kernel (GPU)
  RmsOneShot,  // allreduce + RMSNorm: one shot, the norm as the reduction's epilogue
  RmsTwoShot,  // allreduce + RMSNorm: reduce-scatter by token rows, norm, all-gather
  RmsUnfused,  // allreduce + RMSNorm: the allreduce select() picks, then the local norm kernel
  SrBf16,      // reduce_scatter_quantized: the peer-memory kernel (bf16 stochastic rounding on the
               // wire, f32 accumulation); Base: the NCCL sequence (round, all-to-all, local sum)
};
const char* algoName(Algo a);
/// The name of the algorithm the last select() of this thread returned, and forgets it (nullptr:
/// none since the last take). dispatch() takes it around a call, for Comm::dump().
const char* takeSelectedAlgo();

/// What a backend can run for one call: facts of the comm, then "this algorithm accepts these
/// arguments now" for each candidate (on GPUs: each entry of the algorithm registry,
/// gpu/registry/registry.h, that accepts the call and whose staging did not fail to allocate).
/// select() returns Base or an algorithm whose capability is on, never another.
struct Caps {
  int worldSize = 1;
  bool host = false;       // CPU comm: shm algorithms, no NCCL ("nccl" falls to the size rule)
  bool nccl = false;       // NCCL carries what no peer algorithm takes
  bool plainNccl = false;  // backend "nccl": peer kernels only for what NCCL cannot do (bitwise)
  bool timed = true;       // the size tables apply (false when ranks share a GPU: every size
                           // runs on the peer-memory algorithms)
  bool peer = false;       // the full-precision peer algorithms take this dtype and op
  bool flat = false, lamport = false, tree = false;  // allreduce
  bool ll = false, pipelined = false;                // the exchanges (XchgLL, XchgPipe)
  bool fp8 = false, fp8OneShot = false;
  bool peerBarrier = false;
  bool rmsOneShot = false, rmsTwoShot = false;  // the fused allreduce + RMSNorm kernels accept
  bool srBf16 = false;  // the reduce_scatter_quantized peer kernel accepts
  bool dataAsFlag = true;  // auto may pick the kernels whose data is its own flag (flat, lamport,
                           // fp8_oneshot); false on HIP builds, where that relies on a link
                           // property AMD does not document (forced choices still run them)

  /// The capability of `a` (Base and RmsUnfused: always; they need no peer kernel of their own).
  bool can(Algo a) const;
  /// Sets the capability of `a` (Base and RmsUnfused: ignored).
  void allow(Algo a, bool on);
};

/// Checks hints (per call or per comm) against the table of every hint key and its values
/// (core/settings/table.cc): an unknown key or value is cclxInvalidArgument naming the valid ones. Comm calls it
/// for every collective and at creation, before anything is enqueued.
void checkHints(const std::map<std::string, std::string>& hints);
/// Every hint key of that table (the torchcomms backend keeps the keys cclx knows).
std::vector<std::string> hintKeys();

/// The reduce-scatter that runs a ReduceScatterQuantized call whose selection is Fp8 (hint
/// "low_precision" = "fp8": cclx's FP8 e4m3 payload with per-block scales, round to nearest,
/// instead of bf16 rounded stochastically): type ReduceScatter, the same buffers, count, op and
/// options, no seed; `what` names the call in messages.
CollArgs quantizedAsFp8(const CollArgs& a);

/// The algorithm for one call. Throws cclxInvalidArgument for an unknown "algo" or "fp8_algo"
/// hint or setting (on every backend alike).
Algo select(const CollArgs& a, const Config& cfg, const Caps& caps);

/// True when the call asks for FP8: per-call hint "low_precision" = "fp8" (forces it, any size),
/// or the per-collective setting (CCLX_LOW_PRECISION_ENABLE[_<COLL>]) is on and the message is at
/// least cfg.lpMinBytes. Hint "low_precision" = "off" disables it. Only AllReduce, AllGather,
/// ReduceScatter and AllToAll with f32/bf16/f16 data and SUM/AVG (reductions) qualify.
bool lowPrecisionWanted(const CollArgs& a, const Config& cfg);

/// Largest message (bytes per rank) auto runs on each allreduce algorithm with `worldSize` ranks
/// on GPUs (CCLX_DDA_*_MAX_BYTES and CCLX_FP8_ONESHOT_MAX_BYTES override; 0 = never).
size_t ddaFlatMaxBytes(const Config& cfg, int worldSize);
size_t ddaLamportMaxBytes(const Config& cfg, int worldSize);
size_t ddaTreeMaxBytes(const Config& cfg, int worldSize);
size_t fp8OneShotMaxBytes(const Config& cfg, int worldSize);
/// Largest message (tokens x hidden x element size) auto runs fused one-shot / two-shot on GPUs
/// (CCLX_FUSED_ONESHOT_MAX_BYTES / CCLX_FUSED_TWOSHOT_MAX_BYTES override; 0 = never).
size_t fusedOneShotMaxBytes(const Config& cfg, int worldSize);
size_t fusedTwoShotMaxBytes(const Config& cfg, int worldSize);

/// Largest call auto runs on the DDA exchange kernels with `worldSize` ranks on GPUs, in bytes of
/// the larger buffer of a rank (all-gather: its output, reduce-scatter and all-to-all: its input);
/// CCLX_DDA_<COLL>_MAX_BYTES override (0 = never). All-to-all-v has no size rule: a rank does not
/// know the other ranks' counts, and every rank must choose alike.
size_t ddaExchangeMaxBytes(const Config& cfg, CollType type, int worldSize);

}  // namespace cclx
