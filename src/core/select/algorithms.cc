// The catalogue's rows as constexpr data, checked at compile time, and what is derived from them:
// names, collectives, ranges, hint values and their resolution, Caps (see algorithms.h).
#include "core/select/algorithms.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <string>

#include "base/error.h"
#include "core/settings/config.h"

namespace cclx {

namespace {

constexpr size_t KiB = 1024;
constexpr size_t MiB = KiB * KiB;

// The rows (algorithms.def), in Algo order.
#define CCLX_UP_TO(field, setting, bytes) \
  AlgoRange{&Config::field, setting, [](int n) -> size_t { return bytes; }, nullptr, -1}
#define CCLX_RANGE(words) AlgoRange{nullptr, nullptr, nullptr, words, -1}
#define CCLX_RANGE_OF(id) AlgoRange{nullptr, nullptr, nullptr, nullptr, int(Algo::id)}
#define CCLX_ALGO(id, name, hint, aliases, flags, range, doc) \
  AlgoRow{Algo::id, name, hint, aliases, flags, range, doc},
#define CCLX_SERVES(...)
constexpr AlgoRow kRows[] = {
#include "core/select/algorithms.def"
};
#undef CCLX_ALGO
#undef CCLX_SERVES

// The CCLX_SERVES lines, with their factories' names.
#define CCLX_ALGO(...)
#define CCLX_SERVES(id, colls, device, host) AlgoServes{Algo::id, colls, #device, #host},
constexpr AlgoServes kServes[] = {
#include "core/select/algorithms.def"
};
#undef CCLX_ALGO
#undef CCLX_SERVES
#undef CCLX_UP_TO
#undef CCLX_RANGE
#undef CCLX_RANGE_OF

constexpr bool same(const char* a, const char* b) {
  if (!a || !b) return a == b;
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

// True when '|'-separated `list` holds `word`.
constexpr bool listed(const char* list, const char* word) {
  for (const char* p = list; *p;) {
    const char* w = word;
    while (*p && *p != '|' && *p == *w) ++p, ++w;
    if ((*p == '|' || !*p) && !*w) return true;
    while (*p && *p != '|') ++p;
    if (*p) ++p;
  }
  return false;
}

constexpr CollSet collsOfRow(Algo a) {
  CollSet s = 0;
  for (const AlgoServes& v : kServes)
    if (v.id == a) s |= v.colls;
  return s;
}

// The rows keep their contract (algorithms.def): Algo order, unique names, every row serving a
// collective, at most one object per (collective, algorithm) and backend, a hint value that
// asks for one row per collective, ranges that point at a row with a range of its own.
constexpr bool wellFormed() {
  for (size_t i = 0; i < std::size(kRows); ++i) {
    const AlgoRow& r = kRows[i];
    if (int(r.id) != int(i) || !r.name || !*r.name || !r.doc || collsOfRow(r.id) == 0) return false;
    if (r.range.sameAs >= int(std::size(kRows)) || (r.range.sameAs >= 0 &&
                                                    kRows[r.range.sameAs].range.sameAs >= 0))
      return false;
    for (size_t j = 0; j < std::size(kRows); ++j) {
      if (i == j) continue;
      const AlgoRow& o = kRows[j];
      if (same(r.name, o.name)) return false;
      // One row per (hint value, collective): a name or alias of two rows of one hint never
      // serves a collective twice.
      if (r.hint && same(r.hint, o.hint) && (collsOfRow(r.id) & collsOfRow(o.id)) &&
          (listed(o.aliases, r.name) || same(o.name, r.name)))
        return false;
    }
  }
  for (size_t i = 0; i < std::size(kServes); ++i)
    for (size_t j = i + 1; j < std::size(kServes); ++j)
      if (kServes[i].id == kServes[j].id && (kServes[i].colls & kServes[j].colls) &&
          ((!same(kServes[i].device, "noDevice") && !same(kServes[j].device, "noDevice")) ||
           (!same(kServes[i].host, "noHost") && !same(kServes[j].host, "noHost"))))
        return false;
  return std::size(kRows) == size_t(kNumAlgos);
}
static_assert(wellFormed(), "algorithms.def breaks its contract (see the comment at its top)");

constexpr CollSet kAllColls = (CollSet(1) << kNumCollTypes) - 1;
static_assert(collsOfRow(Algo::Base) == kAllColls, "base serves every collective");

bool policy(const char* key, const std::string& v) {
  return v == "auto" || (v == "dda" && std::string_view(key) == "algo");
}

[[noreturn]] void badHint(const char* key, const std::string& v) {
  std::string valid;
  const std::string all = catalogueHintValues(key);
  for (char c : all) valid += c == '|' ? std::string(", ") : std::string(1, c);
  CCLX_THROW(cclxInvalidArgument, "hint %s='%s' is not one of %s", key, v.c_str(), valid.c_str());
}

}  // namespace

std::span<const AlgoRow> algorithms() { return kRows; }
std::span<const AlgoServes> servings() { return kServes; }
const AlgoRow& row(Algo a) { return kRows[int(a)]; }
const char* algoName(Algo a) { return int(a) < kNumAlgos ? kRows[int(a)].name : "?"; }
CollSet collsOf(Algo a) { return collsOfRow(a); }

CollType runsAs(CollType t, Algo a) {
  return t == CollType::ReduceScatterQuantized && a == Algo::Fp8 ? CollType::ReduceScatter : t;
}

size_t autoMaxBytes(Algo a, const Config& cfg, int n) {
  const AlgoRange& r = row(a).range.sameAs >= 0 ? kRows[row(a).range.sameAs].range : row(a).range;
  if (!r.field) return std::numeric_limits<size_t>::max();
  const size_t set = cfg.*r.field;
  return set ? set : r.table(n);
}

HintChoice resolveHint(const char* key, const std::string& value, CollType t) {
  HintChoice c;
  if (value == "auto") return c;
  if (policy(key, value)) {
    c.kind = HintChoice::AnyKernel;
    return c;
  }
  const AlgoRow* alias = nullptr;
  for (const AlgoRow& r : kRows) {
    if (!same(r.hint, key)) continue;
    const bool isName = value == r.name, isAlias = listed(r.aliases, value.c_str());
    if (!isName && !isAlias) continue;
    c.named = true;
    if (!(collsOfRow(r.id) & collBit(t))) continue;
    if (isName) {
      c.kind = HintChoice::Row;
      c.algo = r.id;
      return c;
    }
    alias = &r;
  }
  if (alias) {
    c.kind = HintChoice::Row;
    c.algo = alias->id;
    return c;
  }
  if (!c.named) badHint(key, value);
  return c;
}

const char* catalogueHintValues(const char* key) {
  static const std::map<std::string, std::string> values = [] {
    std::map<std::string, std::string> m;
    for (const char* k : {"algo", "fp8_algo", "fused_algo"}) {
      std::string list = "auto";
      for (const AlgoRow& r : kRows)
        if (same(r.hint, k)) list += std::string("|") + r.name;
      for (const AlgoRow& r : kRows) {  // the aliases that are not a name already
        if (!same(r.hint, k) || !*r.aliases) continue;
        std::string_view rest = r.aliases;
        while (!rest.empty()) {
          const std::string a(rest.substr(0, rest.find('|')));
          rest.remove_prefix(std::min(rest.size(), a.size() + 1));
          if (!listed(list.c_str(), a.c_str())) list += "|" + a;
        }
      }
      m[k] = list + (std::string_view(k) == "algo" ? "|dda" : "");
    }
    return m;
  }();
  const auto it = values.find(key);
  return it == values.end() ? "" : it->second.c_str();
}

bool Caps::can(Algo a) const { return (row(a).flags & kNoKernel) || ((runs >> int(a)) & 1u); }

void Caps::allow(Algo a, bool on) {
  if (row(a).flags & kNoKernel) return;
  if (on) runs |= 1u << int(a);
  else runs &= ~(1u << int(a));
}

}  // namespace cclx
