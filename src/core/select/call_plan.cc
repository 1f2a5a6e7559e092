// planCall / growPlan (call_plan.h).
#include "core/select/call_plan.h"

#include "base/error.h"

namespace cclx {

bool movesNothing(const CollArgs& a) {
  return a.count == 0 && a.type != CollType::AllToAllV && a.type != CollType::AllToAllVDevice &&
         a.type != CollType::Barrier && a.type != CollType::SendRecv;
}

CallPlan planCall(const CollArgs& call, const CallSteps& steps) {
  CallPlan p;
  p.algo = steps.select(call);  // once per call; a bad "algo" hint fails here
  if (call.type == CollType::ReduceScatterQuantized && p.algo == Algo::Fp8) {
    p.lowered = true;
    p.loweredArgs = quantizedAsFp8(call);
  }
  if (p.algo == Algo::Base && !movesNothing(p.args(call))) steps.requireNccl(p.args(call));
  return p;
}

void growPlan(CallPlan& plan, const CollArgs& call, const CallPlace& at, const CallSteps& steps) {
  plan.algo = steps.grow(plan.args(call), plan.algo, !plan.lowered);
  if (plan.lowered && plan.algo == Algo::Base) {
    // The lowered call's staging failed: the call chooses again as itself.
    plan.lowered = false;
    plan.loweredArgs = CollArgs{};
    plan.algo = steps.select(call);
    if (plan.algo == Algo::Base && !movesNothing(call)) steps.requireNccl(call);
    plan.algo = steps.grow(call, plan.algo, true);
  }
  if (call.type == CollType::AllToAllVDevice && plan.algo == Algo::Base && at.capturing &&
      at.worldSize > 1)
    CCLX_THROW(cclxInvalidUsage, "rank %d: all_to_all_v_device runs through NCCL on this comm (%s), "
               "which reads the split sizes on the host and synchronizes the stream: it cannot be "
               "captured in a CUDA graph", at.rank, at.whyNccl.c_str());
}

}  // namespace cclx
