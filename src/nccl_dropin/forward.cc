// The NCCL functions the drop-in passes through unchanged: each calls the real NCCL's function of
// the same name (abi.h lists them), or fails with ncclInvalidUsage when the loaded NCCL lacks it.
#include "nccl_dropin/errors.h"
#include "nccl_dropin/real.h"

using namespace cclx::dropin;

#define CCLX_FORWARD(name, params, args)                          \
  CCLX_DROPIN_EXPORT ncclResult_t name params {                   \
    clearError();                                                 \
    auto fn = real().name;                                        \
    return fn ? fn args : missing(#name);                         \
  }                                                               \
  CCLX_DROPIN_ALIAS(ncclResult_t, name, params)
#define CCLX_SKIP(...)
CCLX_NCCL_RESULT_FUNCTIONS(CCLX_FORWARD, CCLX_SKIP)
#undef CCLX_FORWARD

#define CCLX_FORWARD_OTHER(type, name, params, args, fallback)    \
  CCLX_DROPIN_EXPORT type name params {                           \
    auto fn = real().name;                                        \
    if (fn) return fn args;                                       \
    (void)missing(#name);                                         \
    return fallback;                                              \
  }                                                               \
  CCLX_DROPIN_ALIAS(type, name, params)
CCLX_NCCL_OTHER_FUNCTIONS(CCLX_FORWARD_OTHER, CCLX_SKIP)
#undef CCLX_FORWARD_OTHER
#undef CCLX_SKIP
