// docs/ALGORITHMS.md from the catalogue (algorithms.def); the cclx_settings_doc tool writes it
// (--algorithms) and a test checks the committed file against it.
#include <string>

#include "core/select/algorithms.h"

namespace cclx {

namespace {

std::string code(const std::string& s) { return "`" + s + "`"; }

std::string bytes(size_t b) {
  if (b == 0) return "never";
  if (b % (size_t(1) << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// The collectives of a set, by their API names.
std::string colls(CollSet s) {
  std::string out;
  for (int t = 0; t < kNumCollTypes; ++t)
    if (s & collBit(CollType(t))) out += (out.empty() ? "" : ", ") + std::string(traits(CollType(t)).api);
  return out;
}

// The factories of `a` on one backend ("" where it has none).
std::string objects(Algo a, bool device) {
  std::string out;
  for (const AlgoServes& v : servings()) {
    const std::string f = device ? v.device : v.host;
    if (v.id != a || f == "noDevice" || f == "noHost") continue;
    out += (out.empty() ? "" : ", ") + code(f) + " (" + colls(v.colls) + ")";
  }
  return out;
}

std::string range(const AlgoRow& r) {
  const AlgoRange& g = r.range.sameAs >= 0 ? row(Algo(r.range.sameAs)).range : r.range;
  std::string s = r.range.sameAs >= 0 ? "as " + code(algoName(Algo(r.range.sameAs))) + ": " : "";
  if (!g.field) return s + g.words;
  return s + "up to " + code(g.setting) + " (built in: " + bytes(g.table(2)) + " at 2 ranks, " +
         bytes(g.table(4)) + " at 4, " + bytes(g.table(8)) + " at 8)";
}

std::string flags(uint32_t f) {
  std::string s;
  auto add = [&](uint32_t bit, const char* word) {
    if (f & bit) s += (s.empty() ? "" : ", ") + std::string(word);
  };
  add(kNoKernel, "no kernel");
  add(kStaging, "staging");
  add(kLowPrecision, "low precision");
  add(kDataAsFlag, "data as flag");
  return s;
}

std::string aliases(const char* a) {
  std::string s, out;
  for (const char* p = a;; ++p) {
    if (*p == '|' || !*p) {
      if (!s.empty()) out += (out.empty() ? "" : ", ") + code(s);
      s.clear();
      if (!*p) break;
    } else {
      s += *p;
    }
  }
  return out;
}

}  // namespace

std::string algorithmsMarkdown() {
  std::string md =
      "# Algorithms\n\n"
      "<!-- Generated from src/core/select/algorithms.def by the cclx_settings_doc tool; do not "
      "edit.\n     Regenerate: cmake --build build --target cclx_settings_doc && "
      "build/cclx_settings_doc --algorithms docs/ALGORITHMS.md -->\n\n"
      "One catalogue in the sources (`src/core/select/algorithms.def`) holds every algorithm of "
      "both backends: one row per algorithm with its one name, the hint that names it, the "
      "collectives it serves, the objects that run it on GPU comms (`src/gpu`) and on CPU comms "
      "(`src/host`, the CPU twins), its flags and the size range auto may pick it for. The "
      "selection (`src/core/select/select.cc`, [design/selection.md](design/selection.md)) "
      "returns one of these rows; `Comm::dump()`, `selectAllReduceAlgo` (Python `get_algo`) and "
      "the trace log use the same names.\n\n"
      "A row's name is the value of its hint that asks for it (per call or per comm, "
      "[SETTINGS.md](SETTINGS.md)); an alias is an older value that still asks for it on the "
      "collectives the row serves, where no row of that name does. A hint value that names a row "
      "which does not serve the call's collective means `auto`; on the collectives on grouped "
      "messages (broadcast, reduce, reduce_scatter_v, the lowered ones) any name but `base` asks "
      "for the pipelined exchange. Adding an algorithm: [design/selection.md](design/selection.md), "
      "\"Adding an algorithm\".\n\n"
      "Flags: *no kernel*: runs without an object of its own (always a candidate); *staging*: "
      "uses peer staging, allocated on every rank by the first call that runs it; *low "
      "precision*: a candidate only when the call wants FP8; *data as flag*: auto picks it only "
      "where that protocol is known to be safe (not on HIP builds).\n\n"
      "| Name | Hint | Aliases | Collectives | GPU objects | CPU objects | Flags | Auto picks it "
      "| What it is |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const AlgoRow& r : algorithms()) {
    const std::string gpu = objects(r.id, true), cpu = objects(r.id, false);
    md += "| " + code(r.name) + " | " + (r.hint ? code(r.hint) : std::string("(rule)")) + " | " +
          aliases(r.aliases) + " | " + colls(collsOf(r.id)) + " | " +
          (gpu.empty() ? std::string(r.id == Algo::Base ? "NCCL" : "none") : gpu) + " | " +
          (cpu.empty() ? std::string("none") : cpu) + " | " + flags(r.flags) + " | " + range(r) +
          " | " + r.doc + " |\n";
  }
  md += "\n## Hint values\n\n| Hint | Values |\n|---|---|\n";
  for (const char* k : {"algo", "fp8_algo", "fused_algo"}) {
    std::string v;
    for (char c : std::string(catalogueHintValues(k))) v += c == '|' ? std::string("`, `") : std::string(1, c);
    md += "| " + code(k) + " | `" + v + "` |\n";
  }
  return md;
}

}  // namespace cclx
