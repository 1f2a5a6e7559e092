// Logging in NCCL's manner: CCLX_DEBUG=WARN|INFO|TRACE; every line is prefixed with
// "host:pid:tid [rank] CCLX LEVEL".
#pragma once

#include <string>

namespace cclx {

enum class LogLevel : int { NONE = 0, WARN = 1, INFO = 2, TRACE = 3 };

/// Where the level and the log file come from: the settings (core/settings/config.cc, which
/// reads CCLX_DEBUG and CCLX_DEBUG_FILE) install their readers when the library loads. Without
/// them, or when a reader throws (a malformed setting), logging is at WARN on stderr.
void logUseSettings(LogLevel (*level)(), std::string (*file)());

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
