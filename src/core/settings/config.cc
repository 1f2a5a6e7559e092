// The only place that reads CCLX_* environment variables. Malformed values are errors, never
// silently ignored.
#include "core/settings/config.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "base/error.h"
#include "base/log.h"

extern char** environ;

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

int64_t parseTimeoutMs(const char* v) {
  return parseInt("CCLX_TIMEOUT_MS", v, 1, int64_t(1) << 40);
}

// CCLX_TIMEOUT, else TORCHCOMM_TIMEOUT_SECONDS, in ms (0 = no timeout); 600 s when unset.
int64_t defaultTimeoutMsFromEnv() {
  for (const char* name : {"CCLX_TIMEOUT", "TORCHCOMM_TIMEOUT_SECONDS"}) {
    const char* v = envOrNull(name);
    if (!v) continue;
    char* end = nullptr;
    errno = 0;
    const double sec = std::strtod(v, &end);
    if (end == v || *end != '\0' || errno == ERANGE || !(sec >= 0) || sec > 1e9)
      CCLX_THROW(cclxInvalidArgument,
                 "%s='%s' is not a number of seconds in [0, 1e9] (0 = no timeout)", name, v);
    return sec == 0 ? 0 : std::max<int64_t>(1, int64_t(sec * 1000.0 + 0.5));
  }
  return Config().defaultTimeoutMs;
}

void readSize(const char* name, size_t& out) {
  if (const char* v = envOrNull(name)) out = size_t(parseSize(name, v));
}
void readBool(const char* name, bool& out) {
  if (const char* v = envOrNull(name)) out = parseBool(name, v);
}

std::mutex gMu;
Config* gConfig = nullptr;

std::string jobIdFromEnv() {
  if (const char* v = envOrNull("CCLX_JOB_ID")) return v;
  if (const char* v = envOrNull("TORCHELASTIC_RUN_ID")) return v;
  return "cclx";
}

// CCLX_STORE_TOKEN: the store's shared secret ("" = none: loopback only). Its length is checked
// where the store is made (TcpStore::create), so that a short one still reaches the others.
std::string storeTokenFromEnv() {
  const char* v = envOrNull("CCLX_STORE_TOKEN");
  return v ? v : "";
}

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// One warning per unknown CCLX_* name per process (a misspelled setting is otherwise ignored).
void warnUnknownEnvNames() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  for (const std::string& w : unknownEnvNames(environ))
    CCLX_WARN("unknown setting %s; it is ignored", w.c_str());
}

}  // namespace

const std::vector<std::string>& knownEnvNames() {
  static const std::vector<std::string> names = {
      // Settings (Config::fromEnv, README's settings table).
      "CCLX_DEBUG", "CCLX_DEBUG_FILE", "CCLX_CHECK_MODE", "CCLX_TIMEOUT_MS", "CCLX_TIMEOUT",
      "CCLX_ABORT_ON_ERROR", "CCLX_WATCHDOG", "CCLX_JOB_ID", "CCLX_STORE_TOKEN",
      "CCLX_SHM_FLAT_MAX_BYTES", "CCLX_SHM_CHUNK_BYTES", "CCLX_SPIN_ITERATIONS", "CCLX_NCCL_PATH",
      "CCLX_NCCL_PIP_DIR", "CCLX_ALLREDUCE_ALGO", "CCLX_DDA_ENABLE", "CCLX_DDA_FLAT_MAX_BYTES",
      "CCLX_DDA_LAMPORT_MAX_BYTES", "CCLX_DDA_TREE_MAX_BYTES", "CCLX_DDA_STAGING_BYTES",
      "CCLX_DDA_MAX_BLOCKS", "CCLX_LOW_PRECISION_ENABLE", "CCLX_LOW_PRECISION_ALLREDUCE",
      "CCLX_LOW_PRECISION_ALLGATHER", "CCLX_LOW_PRECISION_REDUCESCATTER",
      "CCLX_LOW_PRECISION_ALLTOALL", "CCLX_LOW_PRECISION_MIN_BYTES", "CCLX_FP8_BLOCK_SIZE",
      "CCLX_FP8_PRODUCER_WARPS", "CCLX_FP8_TILES_PER_CTA", "CCLX_FP8_ALLREDUCE_ALGO",
      "CCLX_FP8_ONESHOT_MAX_BYTES", "CCLX_NCCL_INTERCEPT", "CCLX_NCCL_FORWARD",
      "CCLX_DROPIN_SHARED", "CCLX_DDA_ALLGATHER_MAX_BYTES", "CCLX_DDA_REDUCESCATTER_MAX_BYTES",
      "CCLX_DDA_ALLTOALL_MAX_BYTES", "CCLX_WIN_PUT_CE_MIN_BYTES", "CCLX_FUSED_ALGO",
      "CCLX_FUSED_ONESHOT_MAX_BYTES", "CCLX_FUSED_TWOSHOT_MAX_BYTES", "CCLX_FUSED_STAGING_BYTES",
      "CCLX_TORCHCOMMS_ROUTE", "CCLX_TEST_SETUP_FAIL",
      // Read by the Python package, the build and test scripts and the tests.
      "CCLX_EXT_DIR", "CCLX_DROPIN_LIB", "CCLX_GIT_COMMIT", "CCLX_ENABLE_CUDA", "CCLX_CUDA_ARCH",
      "CCLX_TEST_ONLY", "CCLX_TEST_RANKS", "CCLX_TEST_PG_PORT", "CCLX_TEST_TIME_SCALE",
      "CCLX_TEST_WINDOW_ROUNDS"};
  return names;
}

std::vector<std::string> unknownEnvNames(char** env) {
  const auto& known = knownEnvNames();
  std::vector<std::string> out;
  for (char** e = env; e && *e; ++e) {
    if (std::strncmp(*e, "CCLX_", 5) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    std::string name(*e, eq ? size_t(eq - *e) : std::strlen(*e));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    const std::string* best = &known[0];
    size_t bestD = SIZE_MAX;
    for (const auto& k : known) {
      size_t d = editDistance(name, k);
      if (d < bestD) bestD = d, best = &k;
    }
    out.push_back(name + " (did you mean " + *best + "?)");
  }
  std::sort(out.begin(), out.end());
  return out;
}

Config Config::fromEnv() {
  Config c;
  if (const char* v = envOrNull("CCLX_DEBUG")) {
    std::string s = lower(v);
    if (s == "none" || s == "off" || s == "0") c.logLevel = LogLevel::NONE;
    else if (s == "warn") c.logLevel = LogLevel::WARN;
    else if (s == "info") c.logLevel = LogLevel::INFO;
    else if (s == "trace") c.logLevel = LogLevel::TRACE;
    else CCLX_THROW(cclxInvalidArgument, "CCLX_DEBUG='%s' is not one of NONE, WARN, INFO, TRACE", v);
  }
  if (const char* v = envOrNull("CCLX_DEBUG_FILE")) c.logFile = v;

  readBool("CCLX_CHECK_MODE", c.checkMode);
  if (const char* v = envOrNull("CCLX_TIMEOUT_MS"))
    c.timeoutMs = parseTimeoutMs(v);
  c.defaultTimeoutMs = defaultTimeoutMsFromEnv();
  c.defaultTimeoutSet = envOrNull("CCLX_TIMEOUT") || envOrNull("TORCHCOMM_TIMEOUT_SECONDS");
  for (const char* name : {"CCLX_ABORT_ON_ERROR", "TORCHCOMM_ABORT_ON_ERROR"}) {
    if (const char* v = envOrNull(name)) {
      c.abortOnError = parseBool(name, v);
      c.abortOnErrorSet = true;
      break;
    }
  }

  c.jobId = jobIdFromEnv();
  c.storeToken = storeTokenFromEnv();
  if (const char* v = envOrNull("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")) c.mpsThreadPercent = v;

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
  readSize("CCLX_DDA_ALLGATHER_MAX_BYTES", c.ddaAllGatherMaxBytes);
  readSize("CCLX_DDA_REDUCESCATTER_MAX_BYTES", c.ddaReduceScatterMaxBytes);
  readSize("CCLX_DDA_ALLTOALL_MAX_BYTES", c.ddaAllToAllMaxBytes);
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

  if (const char* v = envOrNull("CCLX_FUSED_ALGO")) {
    std::string s = lower(v);
    if (s != "auto" && s != "oneshot" && s != "twoshot" && s != "unfused")
      CCLX_THROW(cclxInvalidArgument,
                 "CCLX_FUSED_ALGO='%s' is not one of auto, oneshot, twoshot, unfused", v);
    c.fusedAlgo = s;
  }
  if (const char* v = envOrNull("CCLX_TORCHCOMMS_ROUTE")) {
    std::string s = lower(v);
    if (s != "auto" && s != "cxx" && s != "python")
      CCLX_THROW(cclxInvalidArgument, "CCLX_TORCHCOMMS_ROUTE='%s' is not one of auto, cxx, python",
                 v);
    c.torchcommsRoute = s;
  }
  readSize("CCLX_FUSED_ONESHOT_MAX_BYTES", c.fusedOneShotMaxBytes);
  readSize("CCLX_FUSED_TWOSHOT_MAX_BYTES", c.fusedTwoShotMaxBytes);
  readSize("CCLX_FUSED_STAGING_BYTES", c.fusedStagingBytes);

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
  if (const char* v = envOrNull("CCLX_DROPIN_SHARED")) {
    const std::string s = lower(v);
    if (s == "auto") c.dropinShared = -1;
    else c.dropinShared = parseBool("CCLX_DROPIN_SHARED", v) ? 1 : 0;
  }
  if (const char* v = envOrNull("CCLX_TEST_SETUP_FAIL")) {
    const std::string s(v);
    const size_t colon = s.find(':');
    const std::string stage = colon == std::string::npos ? "" : s.substr(colon + 1);
    if (stage != "device" && stage != "who" && stage != "alloc" && stage != "open")
      CCLX_THROW(cclxInvalidArgument,
                 "CCLX_TEST_SETUP_FAIL='%s' is not <rank>:<stage> with a stage of device, who, "
                 "alloc, open",
                 v);
    c.testSetupFailRank =
        int(parseInt("CCLX_TEST_SETUP_FAIL", s.substr(0, colon).c_str(), 0, 1 << 20));
    c.testSetupFailStage = stage;
  }
  return c;
}

const Config& config() {
  {
    std::lock_guard<std::mutex> lk(gMu);
    if (gConfig) return *gConfig;
    gConfig = new Config(Config::fromEnv());
  }
  warnUnknownEnvNames();  // after the lock: logging reads the config
  return *gConfig;
}

namespace {
// Logging (base/log.h) reads its level and file from here; installed when the library loads.
LogLevel logLevelSetting() { return config().logLevel; }
std::string logFileSetting() { return config().logFile; }
const bool kLogSettingsInstalled = (logUseSettings(&logLevelSetting, &logFileSetting), true);
}  // namespace

void reloadConfig() {
  Config fresh = Config::fromEnv();  // throws before replacing anything
  std::lock_guard<std::mutex> lk(gMu);
  if (!gConfig) gConfig = new Config(fresh);
  else *gConfig = fresh;
}

RendezvousConfig rendezvousConfig() {
  RendezvousConfig r;
  try {
    Config c = Config::fromEnv();  // the environment as it is now, like config()'s first read
    r.jobId = c.jobId;
    r.storeToken = c.storeToken;
    r.timeoutMs = c.timeoutMs;
    r.defaultTimeoutMs = c.defaultTimeoutMs;
    return r;
  } catch (const Error& e) {
    r.error = e.what();
  }
  warnUnknownEnvNames();
  r.jobId = jobIdFromEnv();
  r.storeToken = storeTokenFromEnv();
  if (const char* v = envOrNull("CCLX_TIMEOUT_MS")) {
    try {
      r.timeoutMs = parseTimeoutMs(v);
    } catch (const Error&) {
    }
  }
  try {
    r.defaultTimeoutMs = defaultTimeoutMsFromEnv();
  } catch (const Error&) {
  }
  return r;
}

}  // namespace cclx
