// The NCCL functions the drop-in passes through unchanged: each calls the real NCCL's function of
// the same name (abi.h lists them), or fails with ncclInvalidUsage when the loaded NCCL lacks it.
// A comm of the shared-GPU mode among the arguments (not an NCCL comm: shared/shared.h) is never
// passed on: the call fails with ncclInvalidUsage naming it (a value-returning function returns
// its "missing" value and leaves the message for ncclGetLastError).
#include "nccl_dropin/errors.h"
#include "nccl_dropin/real.h"
#include "nccl_dropin/shared/shared.h"

using namespace cclx::dropin;

namespace {

template <class T>
ncclComm_t commArg(const T&) {
  return nullptr;
}
ncclComm_t commArg(ncclComm_t c) { return c; }

// The first argument that is a shared comm's handle, else null (one atomic load when the process
// has no shared comm).
template <class... A>
ncclComm_t sharedIn(const A&... a) {
  ncclComm_t found = nullptr;
  ((found = found ? found : (shared::isShared(commArg(a)) ? commArg(a) : nullptr)), ...);
  return found;
}

}  // namespace

#define CCLX_FORWARD(name, params, args)                                    \
  CCLX_DROPIN_EXPORT ncclResult_t name params {                             \
    clearError();                                                           \
    if (ncclComm_t s = sharedIn args) return shared::unsupported(#name, s); \
    auto fn = real().name;                                                  \
    return fn ? fn args : missing(#name);                                   \
  }                                                                         \
  CCLX_DROPIN_ALIAS(ncclResult_t, name, params)
#define CCLX_SKIP(...)
CCLX_NCCL_RESULT_FUNCTIONS(CCLX_FORWARD, CCLX_SKIP, CCLX_SKIP)
#undef CCLX_FORWARD

#define CCLX_FORWARD_OTHER(type, name, params, args, fallback)  \
  CCLX_DROPIN_EXPORT type name params {                         \
    if (ncclComm_t s = sharedIn args) {                         \
      (void)shared::unsupported(#name, s);                      \
      return fallback;                                          \
    }                                                           \
    auto fn = real().name;                                      \
    if (fn) return fn args;                                     \
    (void)missing(#name);                                       \
    return fallback;                                            \
  }                                                             \
  CCLX_DROPIN_ALIAS(type, name, params)
CCLX_NCCL_OTHER_FUNCTIONS(CCLX_FORWARD_OTHER, CCLX_SKIP)
#undef CCLX_FORWARD_OTHER
#undef CCLX_SKIP
