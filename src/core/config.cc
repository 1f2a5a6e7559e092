// The only place that reads CCLX_* environment variables. Malformed values are errors, never
// silently ignored.
#include "core/config.h"

#include <cctype>
#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "core/error.h"

namespace cclx {

namespace {

const char* envOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool parseBool(const char* name, const char* v) {
  std::string s = lower(v);
  if (s == "1" || s == "true" || s == "on" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "off" || s == "no") return false;
  CCLX_THROW(cclxInvalidArgument, "%s='%s' is not a boolean (use 1/0, true/false, on/off)", name, v);
}

// Non-negative integer with an optional binary suffix: K, M, G (also KiB/MiB/GiB, KB/MB/GB).
uint64_t parseSize(const char* name, const char* v) {
  std::string s(v);
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0) CCLX_THROW(cclxInvalidArgument, "%s='%s' is not a non-negative integer", name, v);
  errno = 0;
  unsigned long long n = std::strtoull(s.substr(0, i).c_str(), nullptr, 10);
  if (errno == ERANGE) CCLX_THROW(cclxInvalidArgument, "%s='%s' is out of range", name, v);
  std::string suf = lower(s.substr(i));
  uint64_t mul = 1;
  if (suf.empty() || suf == "b") mul = 1;
  else if (suf == "k" || suf == "kb" || suf == "kib") mul = 1ull << 10;
  else if (suf == "m" || suf == "mb" || suf == "mib") mul = 1ull << 20;
  else if (suf == "g" || suf == "gb" || suf == "gib") mul = 1ull << 30;
  else CCLX_THROW(cclxInvalidArgument, "%s='%s': unknown suffix '%s' (use K, M or G)", name, v,
                  suf.c_str());
  if (n > (UINT64_MAX >> 1) / mul) CCLX_THROW(cclxInvalidArgument, "%s='%s' is out of range", name, v);
  return n * mul;
}

int64_t parseInt(const char* name, const char* v, int64_t lo, int64_t hi) {
  errno = 0;
  char* end = nullptr;
  long long n = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE)
    CCLX_THROW(cclxInvalidArgument, "%s='%s' is not an integer", name, v);
  if (n < lo || n > hi)
    CCLX_THROW(cclxInvalidArgument, "%s=%lld is outside [%lld, %lld]", name, n, (long long)lo,
               (long long)hi);
  return n;
}

void readSize(const char* name, size_t& out) {
  if (const char* v = envOrNull(name)) out = size_t(parseSize(name, v));
}
void readBool(const char* name, bool& out) {
  if (const char* v = envOrNull(name)) out = parseBool(name, v);
}

std::mutex gMu;
Config* gConfig = nullptr;

}  // namespace

Config Config::fromEnv() {
  Config c;
  if (const char* v = envOrNull("CCLX_DEBUG")) {
    std::string s = lower(v);
    if (s == "none" || s == "off" || s == "0") c.logLevel = LogLevel::NONE;
    else if (s == "warn") c.logLevel = LogLevel::WARN;
    else if (s == "info") c.logLevel = LogLevel::INFO;
    else if (s == "trace") c.logLevel = LogLevel::TRACE;
    else CCLX_THROW(cclxInvalidArgument, "CCLX_DEBUG='%s' is not one of WARN, INFO, TRACE", v);
  }
  if (const char* v = envOrNull("CCLX_DEBUG_FILE")) c.logFile = v;

  readBool("CCLX_CHECK_MODE", c.checkMode);
  if (const char* v = envOrNull("CCLX_TIMEOUT_MS"))
    c.timeoutMs = parseInt("CCLX_TIMEOUT_MS", v, 1, int64_t(1) << 40);
  for (const char* name : {"CCLX_TIMEOUT", "TORCHCOMM_TIMEOUT_SECONDS"}) {
    const char* v = envOrNull(name);
    if (!v) continue;
    char* end = nullptr;
    errno = 0;
    const double sec = std::strtod(v, &end);
    if (end == v || *end != '\0' || errno == ERANGE || !(sec >= 0) || sec > 1e9)
      CCLX_THROW(cclxInvalidArgument,
                 "%s='%s' is not a number of seconds in [0, 1e9] (0 = no timeout)", name, v);
    c.defaultTimeoutMs = sec == 0 ? 0 : std::max<int64_t>(1, int64_t(sec * 1000.0 + 0.5));
    break;
  }
  for (const char* name : {"CCLX_ABORT_ON_ERROR", "TORCHCOMM_ABORT_ON_ERROR"}) {
    if (const char* v = envOrNull(name)) {
      c.abortOnError = parseBool(name, v);
      c.abortOnErrorSet = true;
      break;
    }
  }

  if (const char* v = envOrNull("CCLX_JOB_ID")) c.jobId = v;
  else if (const char* v2 = envOrNull("TORCHELASTIC_RUN_ID")) c.jobId = v2;
  else c.jobId = "cclx";

  readBool("CCLX_WATCHDOG", c.watchdog);

  readSize("CCLX_SHM_FLAT_MAX_BYTES", c.shmFlatMaxBytes);
  readSize("CCLX_SHM_CHUNK_BYTES", c.shmChunkBytes);
  if (c.shmChunkBytes < 4096)
    CCLX_THROW(cclxInvalidArgument, "CCLX_SHM_CHUNK_BYTES=%zu is below the minimum of 4096",
               c.shmChunkBytes);
  if (const char* v = envOrNull("CCLX_SPIN_ITERATIONS"))
    c.spinIterations = int(parseInt("CCLX_SPIN_ITERATIONS", v, 0, 1 << 30));

  if (const char* v = envOrNull("CCLX_NCCL_PATH")) c.ncclPath = v;
  if (const char* v = envOrNull("CCLX_NCCL_PIP_DIR")) c.ncclPipDir = v;
  if (const char* v = envOrNull("CCLX_ALLREDUCE_ALGO")) {
    std::string s = lower(v);
    if (s != "auto" && s != "flat" && s != "lamport" && s != "tree" && s != "nccl")
      CCLX_THROW(cclxInvalidArgument,
                 "CCLX_ALLREDUCE_ALGO='%s' is not one of auto, flat, lamport, tree, nccl", v);
    c.allreduceAlgo = s;
  }
  readBool("CCLX_DDA_ENABLE", c.ddaEnable);
  readSize("CCLX_DDA_FLAT_MAX_BYTES", c.ddaFlatMaxBytes);
  readSize("CCLX_DDA_LAMPORT_MAX_BYTES", c.ddaLamportMaxBytes);
  readSize("CCLX_DDA_TREE_MAX_BYTES", c.ddaTreeMaxBytes);
  readSize("CCLX_DDA_STAGING_BYTES", c.ddaStagingBytes);
  if (const char* v = envOrNull("CCLX_DDA_MAX_BLOCKS"))
    c.ddaMaxBlocks = int(parseInt("CCLX_DDA_MAX_BLOCKS", v, 0, 1024));
  readSize("CCLX_WIN_PUT_CE_MIN_BYTES", c.winPutCeMinBytes);

  bool lpAll = false;
  readBool("CCLX_LOW_PRECISION_ENABLE", lpAll);
  c.lpAllReduce = c.lpAllGather = c.lpReduceScatter = c.lpAllToAll = lpAll;
  readBool("CCLX_LOW_PRECISION_ALLREDUCE", c.lpAllReduce);
  readBool("CCLX_LOW_PRECISION_ALLGATHER", c.lpAllGather);
  readBool("CCLX_LOW_PRECISION_REDUCESCATTER", c.lpReduceScatter);
  readBool("CCLX_LOW_PRECISION_ALLTOALL", c.lpAllToAll);
  readSize("CCLX_LOW_PRECISION_MIN_BYTES", c.lpMinBytes);
  if (const char* v = envOrNull("CCLX_FP8_BLOCK_SIZE")) {
    int b = int(parseInt("CCLX_FP8_BLOCK_SIZE", v, 32, 256));
    if (b & (b - 1))
      CCLX_THROW(cclxInvalidArgument, "CCLX_FP8_BLOCK_SIZE=%d is not a power of two", b);
    c.fp8BlockSize = b;
  }
  if (const char* v = envOrNull("CCLX_FP8_PRODUCER_WARPS"))
    c.fp8ProducerWarps = int(parseInt("CCLX_FP8_PRODUCER_WARPS", v, 0, 15));
  if (const char* v = envOrNull("CCLX_FP8_TILES_PER_CTA"))
    c.fp8TilesPerCta = int(parseInt("CCLX_FP8_TILES_PER_CTA", v, 1, 64));
  if (const char* v = envOrNull("CCLX_FP8_ALLREDUCE_ALGO")) {
    std::string s = lower(v);
    if (s != "auto" && s != "oneshot" && s != "twoshot")
      CCLX_THROW(cclxInvalidArgument,
                 "CCLX_FP8_ALLREDUCE_ALGO='%s' is not one of auto, oneshot, twoshot", v);
    c.fp8AllReduceAlgo = s;
  }
  readSize("CCLX_FP8_ONESHOT_MAX_BYTES", c.fp8OneShotMaxBytes);

  readBool("CCLX_NCCL_INTERCEPT", c.ncclIntercept);
  if (const char* v = envOrNull("CCLX_NCCL_FORWARD")) {
    std::string list = lower(v) + ",";
    for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
      std::string name = list.substr(at, comma - at);
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
      while (!name.empty() && std::isspace(static_cast<unsigned char>(name.front()))) name.erase(0, 1);
      if (name.empty()) continue;
      if (name == "allreduce") c.ncclForward |= kForwardAllReduce;
      else if (name == "allgather") c.ncclForward |= kForwardAllGather;
      else if (name == "reducescatter") c.ncclForward |= kForwardReduceScatter;
      else if (name == "alltoall") c.ncclForward |= kForwardAllToAll;
      else if (name == "all") c.ncclForward |= kForwardAllReduce | kForwardAllGather |
                                                kForwardReduceScatter | kForwardAllToAll;
      else
        CCLX_THROW(cclxInvalidArgument,
                   "CCLX_NCCL_FORWARD='%s': '%s' is not one of allreduce, allgather, "
                   "reducescatter, alltoall, all",
                   v, name.c_str());
    }
  }
  return c;
}

const Config& config() {
  std::lock_guard<std::mutex> lk(gMu);
  if (!gConfig) gConfig = new Config(Config::fromEnv());
  return *gConfig;
}

void reloadConfig() {
  Config fresh = Config::fromEnv();  // throws before replacing anything
  std::lock_guard<std::mutex> lk(gMu);
  if (!gConfig) gConfig = new Config(fresh);
  else *gConfig = fresh;
}

}  // namespace cclx
