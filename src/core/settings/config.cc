// Config from the environment, by the table of settings (table.{h,cc}): the only place that
// reads CCLX_* variables. Malformed values are errors, never silently ignored.
#include "core/settings/config.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>

#include "base/error.h"
#include "base/log.h"
#include "core/settings/table.h"

extern char** environ;

namespace cclx {

namespace {

std::mutex gMu;
Config* gConfig = nullptr;

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

const std::vector<std::string>& knownEnvNames() { return settings::knownEnvNames(); }

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
  for (const settings::Entry& e : settings::table()) settings::applyEnv(e, c);
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
  // Each of these on its own, so that the others still count when one is malformed.
  Config c;
  for (const char* name : {"CCLX_JOB_ID", "CCLX_STORE_TOKEN", "CCLX_TIMEOUT_MS", "CCLX_TIMEOUT"}) {
    try {
      settings::applyEnv(*settings::findEnv(name), c);
    } catch (const Error&) {
    }
  }
  r.jobId = c.jobId;
  r.storeToken = c.storeToken;
  r.timeoutMs = c.timeoutMs;
  r.defaultTimeoutMs = c.defaultTimeoutMs;
  return r;
}

}  // namespace cclx
