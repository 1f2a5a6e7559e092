// The CPU twin of the MoE kernels (host/moe.cc; contract in core/moe/engine.h).
#pragma once

#include <memory>

#include "core/moe/engine.h"

namespace cclx {

struct HostCtx;

/// This rank's engine of a MoeBuffer on a CPU comm: its memory (host shared memory, zeroed).
std::unique_ptr<MoeEngine> makeHostMoe(std::shared_ptr<HostCtx> ctx, const moe::Layout& lay);

}  // namespace cclx
