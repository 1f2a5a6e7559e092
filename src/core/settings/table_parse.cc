// Parsing and checking by the table (table.h): environment values, hints, the valid values
// every message names.
#include <cctype>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "base/error.h"
#include "core/settings/table.h"

namespace cclx::settings {

namespace {

constexpr const char* kBoolText = "1/0, true/false, on/off, yes/no";

std::string lower(std::string s) {
  for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

bool listed(const Entry& e, const std::string& v) {
  for (const std::string& a : allowedValues(e))
    if (a == v) return true;
  return false;
}

[[noreturn]] void bad(const char* name, const char* v, const std::string& why) {
  CCLX_THROW(cclxInvalidArgument, "%s='%s' %s", name, v, why.c_str());
}

// The spellings of kBoolText.
const char* const kTrue[] = {"1", "true", "on", "yes"};
const char* const kFalse[] = {"0", "false", "off", "no"};

bool isBool(const char* v) {
  const std::string s = lower(v);
  for (const char* t : kTrue)
    if (s == t) return true;
  for (const char* f : kFalse)
    if (s == f) return true;
  return false;
}

bool parseBool(const char* name, const char* v) {
  const std::string s = lower(v);
  for (const char* t : kTrue)
    if (s == t) return true;
  for (const char* f : kFalse)
    if (s == f) return false;
  bad(name, v, std::string("is not a boolean (") + kBoolText + ")");
}

// Non-negative integer with an optional binary suffix: K, M, G (also KiB/MiB/GiB, KB/MB/GB).
uint64_t parseSize(const Entry& e, const char* name, const char* v) {
  const std::string s(v);
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0) bad(name, v, "is not " + validText(e));
  errno = 0;
  const unsigned long long n = std::strtoull(s.substr(0, i).c_str(), nullptr, 10);
  if (errno == ERANGE) bad(name, v, "is out of range");
  const std::string suf = lower(s.substr(i));
  uint64_t mul = 1;
  if (suf.empty() || suf == "b") mul = 1;
  else if (suf == "k" || suf == "kb" || suf == "kib") mul = 1ull << 10;
  else if (suf == "m" || suf == "mb" || suf == "mib") mul = 1ull << 20;
  else if (suf == "g" || suf == "gb" || suf == "gib") mul = 1ull << 30;
  else bad(name, v, "has an unknown suffix '" + suf + "' (use K, M or G)");
  if (n > (UINT64_MAX >> 1) / mul) bad(name, v, "is out of range");
  if (n * mul < uint64_t(e.lo)) bad(name, v, "is not " + validText(e));
  return n * mul;
}

int64_t parseInt(const Entry& e, const char* name, const char* v) {
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  const bool pow2 = e.kind == Kind::Pow2 && n > 0 && !(n & (n - 1));
  if (end == v || *end != '\0' || errno == ERANGE || n < e.lo || n > e.hi ||
      (e.kind == Kind::Pow2 && !pow2))
    bad(name, v, "is not " + validText(e));
  return n;
}

// Seconds (fractions allowed) in [0, 1e9] -> ms; 0 stays 0 (no timeout), else at least 1 ms.
int64_t parseSeconds(const Entry& e, const char* name, const char* v) {
  char* end = nullptr;
  errno = 0;
  const double sec = std::strtod(v, &end);
  if (end == v || *end != '\0' || errno == ERANGE || !(sec >= 0) || sec > 1e9)
    bad(name, v, "is not " + validText(e));
  return sec == 0 ? 0 : std::max<int64_t>(1, int64_t(sec * 1000.0 + 0.5));
}

const char* envOrNull(const char* name) {
  const char* v = name ? std::getenv(name) : nullptr;
  return (v && *v) ? v : nullptr;
}

}  // namespace

std::vector<std::string> allowedValues(const Entry& e) {
  std::vector<std::string> out;
  if (!e.values) return out;
  const std::string s = e.values;
  for (size_t at = 0;;) {
    const size_t bar = s.find('|', at);
    out.push_back(s.substr(at, bar == std::string::npos ? std::string::npos : bar - at));
    if (bar == std::string::npos) break;
    at = bar + 1;
  }
  return out;
}

std::string validText(const Entry& e) {
  const std::string values = joined(allowedValues(e));
  switch (e.kind) {
    case Kind::Bool: return std::string("a boolean (") + kBoolText + ")";
    case Kind::Size:
      return e.lo > 0 ? "a size of at least " + std::to_string(e.lo) + " (K, M, G suffixes)"
                      : "a non-negative size (K, M, G suffixes)";
    case Kind::Int:
      return "an integer in [" + std::to_string(e.lo) + ", " + std::to_string(e.hi) + "]";
    case Kind::Pow2:
      return "a power of two in [" + std::to_string(e.lo) + ", " + std::to_string(e.hi) + "]";
    case Kind::Seconds: return "a number of seconds in [0, 1e9] (0 = no timeout)";
    case Kind::Choice: return "one of " + values;
    case Kind::List: return "a comma list of " + values;
    case Kind::AutoBool: return std::string("auto or a boolean (") + kBoolText + ")";
    case Kind::RankStage: return "<rank>:<stage> with a stage of " + values;
    case Kind::Text: return "any text";
  }
  return "";
}

Value parseEnv(const Entry& e, const char* name, const char* v) {
  Value out;
  switch (e.kind) {
    case Kind::Bool: out.b = parseBool(name, v); out.i = out.b; out.n = out.b; break;
    case Kind::Size: out.n = parseSize(e, name, v); out.i = int64_t(out.n); break;
    case Kind::Int:
    case Kind::Pow2: out.i = parseInt(e, name, v); out.n = uint64_t(out.i); break;
    case Kind::Seconds: out.i = parseSeconds(e, name, v); break;
    case Kind::Choice:
      out.s = lower(v);
      if (!listed(e, out.s)) bad(name, v, "is not " + validText(e));
      break;
    case Kind::List: {
      const std::string list = lower(v) + ",";
      for (size_t at = 0, comma; (comma = list.find(',', at)) != std::string::npos; at = comma + 1) {
        const std::string item = trim(list.substr(at, comma - at));
        if (item.empty()) continue;
        if (!listed(e, item))
          CCLX_THROW(cclxInvalidArgument, "%s='%s': '%s' is not one of %s", name, v, item.c_str(),
                     joined(allowedValues(e)).c_str());
        out.items.push_back(item);
      }
      break;
    }
    case Kind::AutoBool:
      if (lower(v) == "auto") out.i = -1;
      else if (isBool(v)) out.i = parseBool(name, v) ? 1 : 0;
      else bad(name, v, "is not " + validText(e));
      break;
    case Kind::RankStage: {
      const std::string s(v);
      const size_t colon = s.find(':');
      const std::string rank = colon == std::string::npos ? s : s.substr(0, colon);
      out.s = colon == std::string::npos ? "" : s.substr(colon + 1);
      char* end = nullptr;
      errno = 0;
      const long long r = std::strtoll(rank.c_str(), &end, 10);
      if (!listed(e, out.s) || rank.empty() || *end != '\0' || errno == ERANGE || r < e.lo ||
          r > e.hi)
        bad(name, v, "is not " + validText(e) + " and a rank in [" + std::to_string(e.lo) + ", " +
                         std::to_string(e.hi) + "]");
      out.i = r;
      break;
    }
    case Kind::Text: out.s = v; break;
  }
  return out;
}

bool applyEnv(const Entry& e, Config& c) {
  if (!e.env || !e.set) return false;
  const char* name = e.env;
  const char* v = envOrNull(e.env);
  if (!v && e.alias) v = envOrNull(name = e.alias);
  if (!v) return false;
  e.set(c, parseEnv(e, name, v));
  return true;
}

const Entry* findEnv(const std::string& name) {
  for (const Entry& e : table())
    if ((e.env && name == e.env) || (e.alias && name == e.alias)) return &e;
  return nullptr;
}

const Entry* findHint(const std::string& key) {
  for (const Entry& e : table())
    if (e.hint && key == e.hint) return &e;
  return nullptr;
}

std::vector<std::string> hintKeys() {
  std::vector<std::string> keys;
  for (const Entry& e : table())
    if (e.hint) keys.emplace_back(e.hint);
  return keys;
}

void checkHint(const std::string& key, const std::string& value) {
  const Entry* e = findHint(key);
  if (!e)
    CCLX_THROW(cclxInvalidArgument, "unknown hint '%s' (valid hints: %s)", key.c_str(),
               joined(hintKeys()).c_str());
  // Hint values are taken exactly as listed (lowercase); environment values in any case.
  if (!listed(*e, value))
    CCLX_THROW(cclxInvalidArgument, "hint %s='%s' is not one of %s", key.c_str(), value.c_str(),
               joined(allowedValues(*e)).c_str());
}

void checkHints(const std::map<std::string, std::string>& hints) {
  for (const auto& [key, value] : hints) checkHint(key, value);
}

const std::vector<std::string>& knownEnvNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Entry& e : table())
      for (const char* n : {e.env, e.alias})
        if (n && std::strncmp(n, "CCLX_", 5) == 0) v.emplace_back(n);
    return v;
  }();
  return names;
}

}  // namespace cclx::settings

// The table as the public API gives it (include/cclx/cclx.hpp).
namespace cclx {

std::vector<SettingInfo> settingsTable() {
  std::vector<SettingInfo> out;
  for (const settings::Entry& e : settings::table()) {
    SettingInfo i;
    i.env = e.env ? e.env : "";
    i.alias = e.alias ? e.alias : "";
    i.hint = e.hint ? e.hint : "";
    i.values = settings::allowedValues(e);
    i.defaultValue = e.def;
    i.doc = e.doc;
    i.library = e.reader == settings::Reader::Library;
    out.push_back(std::move(i));
  }
  return out;
}

std::vector<std::string> hintKeys() { return settings::hintKeys(); }

std::vector<std::string> hintValues(const std::string& key) {
  const settings::Entry* e = settings::findHint(key);
  if (!e) settings::checkHint(key, "");  // throws, naming the valid keys
  return settings::allowedValues(*e);
}

std::string defaultStoreToken() { return rendezvousConfig().storeToken; }

std::optional<bool> abortOnErrorSetting() {
  try {
    if (config().abortOnErrorSet) return config().abortOnError;
  } catch (const Error&) {
    // A malformed setting: creating a comm reports it, through the store, to every rank.
  }
  return std::nullopt;
}

}  // namespace cclx
