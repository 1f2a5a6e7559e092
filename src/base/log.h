// Logging in NCCL's manner: CCLX_DEBUG=WARN|INFO|TRACE; every line is prefixed with
// "host:pid:tid [rank] CCLX LEVEL".
#pragma once

#include "core/settings/config.h"

namespace cclx {

void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
/// Rank shown in this process's log prefix (set when a comm is created; -1 = unknown).
void logSetRank(int rank);
bool logEnabled(LogLevel level);

}  // namespace cclx

#define CCLX_LOG(level, ...)                                                 \
  do {                                                                       \
    if (::cclx::logEnabled(level))                                           \
      ::cclx::logMessage(level, __FILE__, __LINE__, __VA_ARGS__);            \
  } while (0)
#define CCLX_WARN(...) CCLX_LOG(::cclx::LogLevel::WARN, __VA_ARGS__)
#define CCLX_INFO(...) CCLX_LOG(::cclx::LogLevel::INFO, __VA_ARGS__)
#define CCLX_TRACE(...) CCLX_LOG(::cclx::LogLevel::TRACE, __VA_ARGS__)
