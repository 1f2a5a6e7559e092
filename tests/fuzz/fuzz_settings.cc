// Fuzzes the settings and hints parsers (src/core/settings, src/core/select):
//  * environment: CCLX_* (and TORCHCOMM_* / TORCHELASTIC_*) variables with fuzzed values, read by
//    Config::fromEnv and rendezvousConfig; unknown-name suggestions (unknownEnvNames) for
//    environ-style arrays of fuzzed entries;
//  * the cross-rank settings check: records as peers send them (compareSettings), and a record
//    encoded from a valid Config compared with itself and with a changed copy;
//  * hints (checkHints) and, when they pass, the selection that reads them (select,
//    lowPrecisionWanted) on fuzzed arguments and capabilities.
// Checks: nothing crashes or trips a sanitizer; a rejected setting or hint is cclxInvalidArgument
// with a message naming it; what is accepted satisfies the documented ranges.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/comm/backend.h"
#include "core/select/select.h"
#include "core/settings/config.h"
#include "core/settings/settings_check.h"
#include "core/settings/table.h"

using namespace cclx;

namespace {

void check(bool ok, const char* what, const char* detail = "") {
  if (!ok) {
    std::fprintf(stderr, "fuzz_settings: %s %s\n", what, detail);
    std::abort();
  }
}

// Every name the parsers read: the table's variables and their aliases.
std::vector<std::string> envNames() {
  std::vector<std::string> v;
  for (const settings::Entry& e : settings::table())
    for (const char* n : {e.env, e.alias})
      if (n) v.emplace_back(n);
  return v;
}
// The allowed values of the setting or hint `name`, from the table.
std::vector<std::string> valuesOf(const settings::Entry* e) { return settings::allowedValues(*e); }
const std::string& pickOne(FuzzedDataProvider& p, const std::vector<std::string>& v) {
  return v[p.ConsumeIntegralInRange<size_t>(0, v.size() - 1)];
}
const std::vector<std::string>& names() {
  static const std::vector<std::string> n = envNames();
  return n;
}

// Values the parsers know, so that the fuzzer reaches past the first check quickly.
const char* const kValues[] = {"0",     "1",     "true", "off",  "yes",   "4096", "64K",
                               "16M",   "1G",    "2g",   "auto", "flat",  "tree", "nccl",
                               "oneshot", "twoshot", "unfused", "allreduce,alltoall", "all",
                               "128",   "32",    "0.5",  "1e9",  "-1",    "1:alloc", "INFO"};

void expectArgError(const Error& e) {
  check(e.code() == cclxInvalidArgument, "a rejected setting or hint is not cclxInvalidArgument");
  check(e.what() && *e.what(), "a rejected setting or hint has no message");
}

void checkConfig(const Config& c, SettingsScope scope) {
  check(c.shmChunkBytes >= 4096, "CCLX_SHM_CHUNK_BYTES below 4096 accepted");
  check(c.fp8BlockSize >= 32 && c.fp8BlockSize <= 256 && !(c.fp8BlockSize & (c.fp8BlockSize - 1)),
        "CCLX_FP8_BLOCK_SIZE outside 32..256 or not a power of two");
  check(c.ddaMaxBlocks >= 0 && c.ddaMaxBlocks <= 1024, "CCLX_DDA_MAX_BLOCKS out of range");
  check(c.fp8ProducerWarps >= 0 && c.fp8ProducerWarps <= 15, "CCLX_FP8_PRODUCER_WARPS range");
  check(c.fp8TilesPerCta >= 1 && c.fp8TilesPerCta <= 64, "CCLX_FP8_TILES_PER_CTA range");
  check(c.timeoutMs == -1 || c.timeoutMs >= 1, "CCLX_TIMEOUT_MS <= 0 accepted");
  check(c.defaultTimeoutMs >= 0, "negative default timeout");
  check(c.spinIterations >= 0, "negative CCLX_SPIN_ITERATIONS");
  check(c.dropinShared >= -1 && c.dropinShared <= 1, "CCLX_DROPIN_SHARED out of range");
  check(!c.jobId.empty(), "empty job id");
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{
                                        "CCLX_ALLREDUCE_ALGO", &c.allreduceAlgo},
                                    {"CCLX_FP8_ALLREDUCE_ALGO", &c.fp8AllReduceAlgo},
                                    {"CCLX_FUSED_ALGO", &c.fusedAlgo},
                                    {"CCLX_TORCHCOMMS_ROUTE", &c.torchcommsRoute}}) {
    const auto allowed = valuesOf(settings::findEnv(name));
    check(std::find(allowed.begin(), allowed.end(), *value) != allowed.end(),
          "a value the table does not list accepted for", name);
  }
  const auto layout = layoutSettings(c, scope);
  const std::string rec = encodeSettings(layout);
  check(compareSettings({rec, rec, rec}).empty(), "a record differs from itself");
  if (layout.empty()) return;
  auto other = layout;
  other[0].second += "x";
  const std::string msg = compareSettings({rec, encodeSettings(other)});
  check(msg.find(layout[0].first) != std::string::npos, "a difference is not named");
}

void fuzzEnv(FuzzedDataProvider& p) {
  std::vector<std::string> set;
  const int n = p.ConsumeIntegralInRange<int>(0, 8);
  for (int i = 0; i < n; ++i) {
    std::string name;
    if (p.ConsumeBool()) {
      name = names()[p.ConsumeIntegralInRange<size_t>(0, names().size() - 1)];
    } else {
      name = "CCLX_" + p.ConsumeRandomLengthString(24);
      if (name.find('=') != std::string::npos || name.find('\0') != std::string::npos) continue;
    }
    std::string value = p.ConsumeBool()
                            ? kValues[p.ConsumeIntegralInRange<size_t>(0, std::size(kValues) - 1)]
                            : p.ConsumeRandomLengthString(32);
    value = value.c_str();  // an environment value ends at its first NUL
    ::setenv(name.c_str(), value.c_str(), 1);
    set.push_back(name);
  }
  bool ok = false;
  try {
    checkConfig(Config::fromEnv(), SettingsScope(p.ConsumeIntegralInRange<int>(0, 2)));
    ok = true;
  } catch (const Error& e) {
    expectArgError(e);
  }
  RendezvousConfig r = rendezvousConfig();  // never throws
  check(ok == r.error.empty(), "rendezvousConfig disagrees with Config::fromEnv");
  check(!r.jobId.empty(), "rendezvousConfig without a job id");
  for (const std::string& name : set) ::unsetenv(name.c_str());
}

// An environ-style array as unknownEnvNames gets it (entries with or without '=').
void fuzzNames(FuzzedDataProvider& p) {
  std::vector<std::string> entries;
  bool onlyRead = true;  // every entry names a variable the parsers read
  const int n = p.ConsumeIntegralInRange<int>(0, 6);
  for (int i = 0; i < n; ++i) {
    std::string e;
    if (p.ConsumeBool()) {
      e = names()[p.ConsumeIntegralInRange<size_t>(0, names().size() - 1)] + "=" +
          p.ConsumeRandomLengthString(8);
    } else {
      e = p.ConsumeRandomLengthString(40);
      if (p.ConsumeBool()) e = "CCLX_" + e;
      onlyRead = false;
    }
    entries.push_back(e.c_str());
  }
  std::vector<char*> env;
  for (std::string& e : entries) env.push_back(e.data());
  env.push_back(nullptr);
  const std::vector<std::string> unknown = unknownEnvNames(env.data());
  for (const std::string& w : unknown)
    check(w.rfind("CCLX_", 0) == 0 && w.find("(did you mean CCLX_") != std::string::npos,
          "unknown-name warning without a suggestion");
  // A variable the parsers read is never called unknown (and ignored) in the warning.
  if (onlyRead && !unknown.empty())
    check(false, "a setting that is read reported unknown:", unknown[0].c_str());
}

void fuzzRecords(FuzzedDataProvider& p) {
  std::vector<std::string> recs;
  const int n = p.ConsumeIntegralInRange<int>(0, 9);
  for (int i = 0; i < n; ++i) recs.push_back(p.ConsumeRandomLengthString(256));
  const std::string msg = compareSettings(recs);
  if (recs.size() <= 1) {
    check(msg.empty() || msg.find("malformed") != std::string::npos,
          "one record reported as differing");
  }
}

void fuzzHints(FuzzedDataProvider& p) {
  static const std::vector<std::string> kKeys = settings::hintKeys();
  static const std::vector<std::string> kHintValues = [] {
    std::vector<std::string> v = {""};
    for (const std::string& k : kKeys)
      for (const std::string& x : valuesOf(settings::findHint(k))) v.push_back(x);
    return v;
  }();
  std::map<std::string, std::string> hints;
  const int n = p.ConsumeIntegralInRange<int>(0, 4);
  for (int i = 0; i < n; ++i) {
    std::string k = p.ConsumeBool() ? pickOne(p, kKeys) : p.ConsumeRandomLengthString(16);
    std::string v = p.ConsumeBool() ? pickOne(p, kHintValues) : p.ConsumeRandomLengthString(16);
    hints[k] = v;
  }
  try {
    checkHints(hints);
  } catch (const Error& e) {
    expectArgError(e);
    return;
  }
  CollArgs a;
  a.type = CollType(p.ConsumeIntegralInRange<int>(0, int(CollType::AllReduceRmsNorm)));
  a.dtype = DataType(p.ConsumeIntegralInRange<int>(0, cclxNumTypes - 1));
  a.op = ReduceOp(RedOpKind(p.ConsumeIntegralInRange<int>(0, cclxNumOps - 1)));
  a.count = p.ConsumeIntegralInRange<size_t>(0, size_t(1) << 40);
  a.rms.tokens = p.ConsumeIntegralInRange<size_t>(0, 1 << 20);
  a.rms.hidden = p.ConsumeIntegralInRange<size_t>(1, (1 << 24) - 1);
  a.rms.dtype = a.dtype;
  a.opts.hints = hints;
  Caps c;
  c.worldSize = p.ConsumeIntegralInRange<int>(1, 1024);
  bool* flags[] = {&c.host, &c.nccl, &c.plainNccl, &c.timed, &c.peer, &c.dataAsFlag};
  for (bool* f : flags) *f = p.ConsumeBool();
  for (const AlgoRow& r : algorithms()) c.allow(r.id, p.ConsumeBool());
  Config cfg;  // defaults, with the sizes and switches the selection reads fuzzed
  size_t* sizes[] = {&cfg.ddaFlatMaxBytes, &cfg.ddaLamportMaxBytes, &cfg.ddaTreeMaxBytes,
                     &cfg.ddaAllGatherMaxBytes, &cfg.ddaReduceScatterMaxBytes,
                     &cfg.ddaAllToAllMaxBytes, &cfg.lpMinBytes, &cfg.fp8OneShotMaxBytes,
                     &cfg.fusedOneShotMaxBytes, &cfg.fusedTwoShotMaxBytes};
  for (size_t* s : sizes)
    if (p.ConsumeBool()) *s = p.ConsumeIntegral<size_t>();
  bool* sw[] = {&cfg.lpAllReduce, &cfg.lpAllGather, &cfg.lpReduceScatter, &cfg.lpAllToAll};
  for (bool* s : sw) *s = p.ConsumeBool();
  // Every value the table allows for the settings the selection reads.
  static const std::vector<std::string> kAlgo = valuesOf(settings::findEnv("CCLX_ALLREDUCE_ALGO"));
  static const std::vector<std::string> kFp8 = valuesOf(settings::findEnv("CCLX_FP8_ALLREDUCE_ALGO"));
  static const std::vector<std::string> kFused = valuesOf(settings::findEnv("CCLX_FUSED_ALGO"));
  cfg.allreduceAlgo = pickOne(p, kAlgo);
  cfg.fp8AllReduceAlgo = pickOne(p, kFp8);
  cfg.fusedAlgo = pickOne(p, kFused);
  // Hints and settings that passed their checks: the selection takes them without an error.
  const Algo algo = select(a, cfg, c);
  check(std::string(algoName(algo)) != "?", "select returned no algorithm");
  (void)lowPrecisionWanted(a, cfg);
  for (int w : {1, 2, 3, 8, c.worldSize}) {
    (void)autoMaxBytes(Algo::Flat, cfg, w);
    (void)ddaExchangeMaxBytes(cfg, a.type, w);
    (void)autoMaxBytes(Algo::FusedTwoShot, cfg, w);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The process-wide configuration (logging reads it) comes from the real environment once,
  // quiet, before any fuzzed variable exists.
  ::setenv("CCLX_DEBUG", "NONE", 1);
  reloadConfig();
  ::unsetenv("CCLX_DEBUG");
  for (const std::string& n : names()) ::unsetenv(n.c_str());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  switch (p.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: fuzzEnv(p); break;
    case 1: fuzzRecords(p); break;
    case 2: fuzzNames(p); break;
    default: fuzzHints(p); break;
  }
  return 0;
}
