// The one table of settings (CCLX_* environment variables) and hints (per-call / per-comm keys of
// Options::hints and CollOptions::hints). Each entry holds its names, the Config field it sets,
// its parser, its allowed values, its default and a one-line doc. It drives the environment
// parsing (Config::fromEnv), the known-name list behind unknown-name warnings, the hint checks,
// every message about a bad value, cclx._C.hint_keys() and docs/SETTINGS.md (settingsMarkdown,
// written by the cclx_settings_doc tool).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/settings/config.h"

namespace cclx::settings {

enum class Kind : uint8_t {
  Bool,       // 1/0, true/false, on/off, yes/no (any case)
  Size,       // bytes, optional K/M/G suffix (binary); at least lo
  Int,        // integer in [lo, hi]
  Pow2,       // integer in [lo, hi], a power of two
  Seconds,    // seconds in [0, 1e9], fractions allowed; 0 = no timeout
  Choice,     // one of `values` (environment: any case; hint: exactly as listed)
  List,       // comma list of `values` (any case, spaces around items ignored)
  AutoBool,   // auto, or a Bool
  RankStage,  // <rank>:<stage>, stage one of `values`
  Text,       // any string
};

/// A parsed value: the member its kind fills (Bool: b; Size, Int, Pow2: n and i; Seconds: i in
/// ms; Choice, Text: s, Choice lowercased; List: items; AutoBool: i = -1, 0 or 1; RankStage: i
/// and s).
struct Value {
  bool b = false;
  int64_t i = 0;
  uint64_t n = 0;
  std::string s;
  std::vector<std::string> items;
};

/// Where an entry is read.
enum class Reader : uint8_t {
  Library,  // Config::fromEnv (and hints: Comm's checks, the selection)
  Outside,  // read by the Python package, the build or the test scripts (known, not parsed here)
};

struct Entry {
  const char* env;    // environment variable, or nullptr (a hint only)
  const char* alias;  // read when `env` is unset (torchcomms' / torchelastic's name), or nullptr
  const char* hint;   // hint key, or nullptr (no hint)
  Kind kind;
  const char* values;  // Choice, List, RankStage: the allowed values, '|' between; else nullptr
  int64_t lo, hi;      // Size: the minimum (lo); Int, Pow2: the range
  const char* def;     // the default, as documented
  const char* doc;     // one line
  const char* field;   // the Config field(s) it sets ("" for a hint only or an outside name)
  void (*set)(Config&, const Value&);  // stores a parsed value; nullptr: not in Config
  Reader reader = Reader::Library;
};

/// Every entry, in the order Config::fromEnv applies them (later entries may override earlier
/// ones: CCLX_LOW_PRECISION_<COLL> after CCLX_LOW_PRECISION_ENABLE).
const std::vector<Entry>& table();

/// The entry of an environment variable (its name or alias) or a hint key; nullptr if none.
const Entry* findEnv(const std::string& name);
const Entry* findHint(const std::string& key);

/// The allowed values of a Choice / List / RankStage entry, in order ("" for other kinds).
std::vector<std::string> allowedValues(const Entry& e);
/// What a valid value looks like, for messages and docs: "auto, flat, tree" (Choice),
/// "1/0, true/false, on/off, yes/no" (Bool), "an integer in [0, 1024]" (Int), ...
std::string validText(const Entry& e);

/// Parses one environment value of `e` (its name in messages: `name`). Throws
/// cclxInvalidArgument naming the variable, the value and the valid ones.
Value parseEnv(const Entry& e, const char* name, const char* value);
/// Reads `e` from the environment (its name, else its alias) into `c`; false when unset.
bool applyEnv(const Entry& e, Config& c);

/// Checks hints: an unknown key or a value not listed is cclxInvalidArgument naming the valid
/// keys or values.
void checkHints(const std::map<std::string, std::string>& hints);
/// Checks one hint value (the key must be known).
void checkHint(const std::string& key, const std::string& value);
/// Every hint key, in table order.
std::vector<std::string> hintKeys();

/// Every CCLX_* name cclx, its Python package or its scripts read.
const std::vector<std::string>& knownEnvNames();

/// docs/SETTINGS.md, generated from the table.
std::string settingsMarkdown();

}  // namespace cclx::settings
