// src/core/select: the algorithm catalogue (algorithms.def, algorithms.h: every algorithm of both
// backends once) and the selection: the one place that holds every hint rule and size rule. Both
// backends (host shared memory, GPU) call select() once per call with what their algorithms can
// run for these arguments (Caps) and run the algorithm it returns. docs/design/selection.md has
// the rules, docs/ALGORITHMS.md the catalogue.
#pragma once

#include <cstddef>
#include <map>
#include <string>

#include "core/comm/backend.h"
#include "core/select/algorithms.h"

namespace cclx {

/// Checks hints (per call or per comm) against the table of every hint key and its values
/// (core/settings/table.cc): an unknown key or value is cclxInvalidArgument naming the valid
/// ones. Comm calls it for every collective and at creation, before anything is enqueued.
void checkHints(const std::map<std::string, std::string>& hints);

/// The call algorithm `algo` runs for `a`: a lowered call where runsAs(a.type, algo) differs
/// (ReduceScatterQuantized on Fp8, hint "low_precision" = "fp8": the FP8 reduce-scatter of the
/// same buffers, count, op and options, FP8 e4m3 payload with per-block scales and round to
/// nearest instead of bf16 rounded stochastically; no seed; `what` names the call), else `a`.
CollArgs lowerFor(const CollArgs& a, Algo algo);

/// The algorithm for one call: one whose capability is on in `caps` (kNoKernel rows always
/// are). Throws cclxInvalidArgument for an unknown "algo", "fp8_algo" or "fused_algo" hint or
/// setting (on every backend alike).
Algo select(const CollArgs& a, const Config& cfg, const Caps& caps);

/// True when the call asks for FP8: per-call hint "low_precision" = "fp8" (forces it, any size),
/// or the per-collective setting (CCLX_LOW_PRECISION_ENABLE[_<COLL>]) is on and the message is at
/// least cfg.lpMinBytes. Hint "low_precision" = "off" disables it. Only the collectives with a
/// low-precision setting (core/comm/collectives.h) with f32/bf16/f16 data and, for reductions,
/// SUM/AVG qualify.
bool lowPrecisionWanted(const CollArgs& a, const Config& cfg);

/// Largest call auto runs on the DDA exchange kernels with `worldSize` ranks on GPUs, in bytes of
/// the larger buffer of a rank (all-gather: its output, reduce-scatter and all-to-all: its input);
/// CCLX_DDA_<COLL>_MAX_BYTES override (0 = never). All-to-all-v has no size rule: a rank does not
/// know the other ranks' counts, and every rank must choose alike.
size_t ddaExchangeMaxBytes(const Config& cfg, CollType type, int worldSize);

}  // namespace cclx
