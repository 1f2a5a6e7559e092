// When a collective runs in FP8: the per-call hint "low_precision" (fp8 forces, off disables),
// otherwise the CCLX_LOW_PRECISION_ENABLE[_<COLL>] settings and a minimum message size.
#include "algos/fp8_algos.h"

#include "core/error.h"

namespace cclx {

bool lowPrecisionWanted(const CollArgs& args, const Config& cfg) {
  bool enabled = false;
  switch (args.type) {
    case CollType::AllReduce: enabled = cfg.lpAllReduce; break;
    case CollType::AllGather: enabled = cfg.lpAllGather; break;
    case CollType::ReduceScatter: enabled = cfg.lpReduceScatter; break;
    case CollType::AllToAll: enabled = cfg.lpAllToAll; break;
    default: return false;
  }
  if (args.dtype != DataType::f32 && args.dtype != DataType::bf16 && args.dtype != DataType::f16)
    return false;
  if ((args.type == CollType::AllReduce || args.type == CollType::ReduceScatter) &&
      args.op.kind != RedOpKind::SUM && args.op.kind != RedOpKind::AVG)
    return false;
  auto it = args.opts.hints.find("low_precision");
  if (it != args.opts.hints.end()) {
    if (it->second == "fp8") return true;
    if (it->second == "off") return false;
  }
  return enabled && args.bytes() >= cfg.lpMinBytes;
}

size_t fp8OneShotTable(int worldSize) {
  // 2 ranks (2x H200, bf16, graph replay, run 16 in docs/PERF.md): one-shot against two-shot 15.3
  // / 19.9 us at 4 MiB, 38.5 / 41.9 at 16 MiB, 68.8 / 71.5 at 32 MiB, 100.1 / 99.9 at 48 MiB,
  // 130.4 / 126.9 at 64 MiB. Other world sizes push N - 1 copies of the message; not measured.
  return worldSize == 2 ? (size_t(32) << 20) : 0;
}

bool fp8OneShotWanted(const CollArgs& args, const Config& cfg, int worldSize) {
  const std::string* want = &cfg.fp8AllReduceAlgo;
  if (auto it = args.opts.hints.find("fp8_algo"); it != args.opts.hints.end()) want = &it->second;
  CCLX_ARG_CHECK(*want == "auto" || *want == "oneshot" || *want == "twoshot",
                 "fp8 allreduce algorithm '%s' is not one of auto|oneshot|twoshot", want->c_str());
  if (*want != "auto") return *want == "oneshot";
  const size_t max = cfg.fp8OneShotMaxBytes ? cfg.fp8OneShotMaxBytes : fp8OneShotTable(worldSize);
  return args.bytes() <= max;
}

}  // namespace cclx
