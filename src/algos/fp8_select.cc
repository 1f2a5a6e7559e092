// When a collective runs in FP8: the per-call hint "low_precision" (fp8 forces, off disables),
// otherwise the CCLX_LOW_PRECISION_ENABLE[_<COLL>] settings and a minimum message size.
#include "algos/fp8_algos.h"

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

}  // namespace cclx
