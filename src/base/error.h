// src/base: the bottom layer, which every other layer (store, core, the backends, the C API, the
// bindings) includes and which includes nothing of cclx but its public header: errors (this file:
// a cclx::Error with a formatted message, argument checks) and logging (log.h). Settings reach
// logging from above (core/settings/config.cc installs the level and file readers).
#pragma once

#include <cclx/cclx.hpp>

#include <string>

namespace cclx {

[[noreturn]] void throwError(cclxResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
std::string strFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace cclx

#define CCLX_THROW(code, ...) ::cclx::throwError(code, __VA_ARGS__)
#define CCLX_REQUIRE(cond, code, ...) \
  do {                                \
    if (!(cond)) CCLX_THROW(code, __VA_ARGS__); \
  } while (0)
#define CCLX_ARG_CHECK(cond, ...) CCLX_REQUIRE(cond, cclxInvalidArgument, __VA_ARGS__)
