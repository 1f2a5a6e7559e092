// What the drop-in's entry points (intercept.cc, entry.cc) share about the shared-GPU mode.
#pragma once

#include "nccl_dropin/shared/shared.h"

namespace cclx {
namespace dropin {

/// The calling rank as the shared mode's decision sees it: the current CUDA device (where NCCL
/// would create the comm) and "<host identity>|<its PCI bus id>".
shared::Local localRank();

}  // namespace dropin
}  // namespace cclx
