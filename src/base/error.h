// src/base: the bottom layer, which every layer of the library (store, core, the backends)
// includes and which includes nothing of cclx but its public header: errors (this file: argument
// checks throwing a cclx::Error with a formatted message), logging (log.h) and platform utilities
// (fd_pass.h). The front ends (C API, bindings, torchcomms, drop-in) use the public header. Settings reach
// logging from above (core/settings/config.cc installs the level and file readers).
#pragma once

#include <cclx/cclx.hpp>

#include <string>

// cclx::throwError and cclx::strFormat are declared in the public header.

#define CCLX_THROW(code, ...) ::cclx::throwError(code, __VA_ARGS__)
#define CCLX_REQUIRE(cond, code, ...) \
  do {                                \
    if (!(cond)) CCLX_THROW(code, __VA_ARGS__); \
  } while (0)
#define CCLX_ARG_CHECK(cond, ...) CCLX_REQUIRE(cond, cclxInvalidArgument, __VA_ARGS__)
