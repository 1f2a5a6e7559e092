// One-sided windows of CPU comms over host shared memory (host/window.cc; contract in
// core/window/window.h and docs/design/windows.md).
#pragma once

#include <memory>

#include "core/window/window.h"

namespace cclx {

struct HostCtx;

/// Collective: a window whose control segments (signal counts) every rank maps.
std::unique_ptr<WinImpl> makeHostWindow(std::shared_ptr<HostCtx> ctx, const WinExchange& ex);

}  // namespace cclx
