// Error helpers: build a cclx::Error with a formatted message, and check CUDA/system calls.
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
