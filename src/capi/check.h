// The C API's argument checks: a failed one throws cclx::Error(code, formatted message), which the
// C API's guard turns into the call's result and its cclxGetLastError text.
#pragma once

#include <cclx/cclx.hpp>

#define CAPI_CHECK(cond, code, ...)                     \
  do {                                                  \
    if (!(cond)) ::cclx::throwError(code, __VA_ARGS__); \
  } while (0)
#define CAPI_ARG_CHECK(cond, ...) CAPI_CHECK(cond, cclxInvalidArgument, __VA_ARGS__)
