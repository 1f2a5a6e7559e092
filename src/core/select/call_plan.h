// The order in which a GPU call settles what it runs on (CudaBackend::run), written once and
// without the GPU runtime so that a CPU test drives it with the backend's steps replaced:
//  1. choose (select) for the call; reduce_scatter_quantized whose choice is the FP8 payload is
//     lowered onto the FP8 reduce-scatter (quantizedAsFp8);
//  2. grow the staging the choice needs. A failed growth (collective: every rank alike) chooses
//     again, and a lowered call chooses again from the call itself, never from what it was
//     lowered to (so the quantized op keeps its own rounding rather than becoming an exact
//     reduce-scatter);
//  3. only then, refuse inside CUDA-graph capture what reads counts on the host: all_to_all_v_device
//     on NCCL at world size > 1 (a capture never receives a node of the NCCL path, also when the
//     growth of step 2 fell back to it).
// Contract of the steps: select returns what the backend would run now (failed staging no longer
// offered); grow(args, algo, chooseAgain) returns the algorithm whose staging is there, choosing
// again itself when chooseAgain and returning Base otherwise; requireNccl throws when the comm has
// no NCCL. Errors of the steps propagate.
#pragma once

#include <functional>
#include <string>

#include "core/comm/backend.h"
#include "core/select/select.h"

namespace cclx {

struct CallSteps {
  std::function<Algo(const CollArgs&)> select;
  std::function<Algo(const CollArgs&, Algo, bool chooseAgain)> grow;
  std::function<void(const CollArgs&)> requireNccl;
};

/// What a call runs: `algo` with args(call) (the call itself, or its lowered form).
struct CallPlan {
  Algo algo = Algo::Base;
  bool lowered = false;
  CollArgs loweredArgs;
  const CollArgs& args(const CollArgs& call) const { return lowered ? loweredArgs : call; }
};

/// Step 1. NCCL is required for a Base choice unless the call moves nothing.
CallPlan planCall(const CollArgs& call, const CallSteps& steps);
/// Where the call runs: this rank, the world size, whether the stream captures, and why the
/// NCCL path is taken (for the refusal's message).
struct CallPlace {
  int rank = 0;
  int worldSize = 1;
  bool capturing = false;
  std::string whyNccl;
};
/// Steps 2 and 3 on `plan` (from planCall of the same call).
void growPlan(CallPlan& plan, const CollArgs& call, const CallPlace& at, const CallSteps& steps);
/// A collective with nothing to move (the same on every rank): it enqueues nothing on any path.
bool movesNothing(const CollArgs& a);

}  // namespace cclx
