// NCCL-style logging: "host:pid:tid [rank] CCLX LEVEL message".
#include "base/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

namespace cclx {

namespace {
std::atomic<int> gRank{-1};
std::mutex gLogMu;
FILE* gLogFile = nullptr;
std::string gLogPath;
std::atomic<LogLevel (*)()> gLevelSetting{nullptr};
std::atomic<std::string (*)()> gFileSetting{nullptr};

LogLevel levelNow() {
  try {
    LogLevel (*level)() = gLevelSetting.load(std::memory_order_acquire);
    return level ? level() : LogLevel::WARN;
  } catch (...) {
    return LogLevel::WARN;  // a malformed setting is reported by whoever reads config()
  }
}

std::string hostName() {
  char h[256] = {0};
  if (gethostname(h, sizeof(h) - 1) != 0) return "unknown";
  return h;
}

// Expands %h (host) and %p (pid) in CCLX_DEBUG_FILE.
std::string expandPath(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '%' && i + 1 < p.size() && p[i + 1] == 'h') { out += hostName(); ++i; }
    else if (p[i] == '%' && i + 1 < p.size() && p[i + 1] == 'p') { out += std::to_string(getpid()); ++i; }
    else out += p[i];
  }
  return out;
}

FILE* sink() {
  std::string want;
  try {
    std::string (*file)() = gFileSetting.load(std::memory_order_acquire);
    if (file) want = file();
  } catch (...) {
  }
  if (want.empty()) return stderr;
  std::string path = expandPath(want);
  if (gLogFile && path == gLogPath) return gLogFile;
  if (gLogFile) std::fclose(gLogFile);
  gLogFile = std::fopen(path.c_str(), "a");
  gLogPath = path;
  if (!gLogFile) {
    std::fprintf(stderr, "CCLX WARN cannot open CCLX_DEBUG_FILE %s: %s; logging to stderr\n",
                 path.c_str(), std::strerror(errno));
    return stderr;
  }
  return gLogFile;
}

const char* levelName(LogLevel l) {
  switch (l) {
    case LogLevel::WARN: return "WARN";
    case LogLevel::INFO: return "INFO";
    case LogLevel::TRACE: return "TRACE";
    default: return "NONE";
  }
}
}  // namespace

bool logEnabled(LogLevel level) { return level != LogLevel::NONE && int(level) <= int(levelNow()); }

void logSetRank(int rank) { gRank.store(rank); }

void logUseSettings(LogLevel (*level)(), std::string (*file)()) {
  gLevelSetting.store(level, std::memory_order_release);
  gFileSetting.store(file, std::memory_order_release);
}

void logMessage(LogLevel level, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  static const std::string host = hostName();
  long tid = long(syscall(SYS_gettid));
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  std::lock_guard<std::mutex> lk(gLogMu);
  FILE* f = sink();
  if (level == LogLevel::TRACE)
    std::fprintf(f, "%s:%d:%ld [%d] CCLX %s %s:%d %s\n", host.c_str(), int(getpid()), tid,
                 gRank.load(), levelName(level), base, line, msg);
  else
    std::fprintf(f, "%s:%d:%ld [%d] CCLX %s %s\n", host.c_str(), int(getpid()), tid, gRank.load(),
                 levelName(level), msg);
  std::fflush(f);
}

void logWarning(const std::string& line) { CCLX_WARN("%s", line.c_str()); }

}  // namespace cclx
