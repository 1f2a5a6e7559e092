// docs/SETTINGS.md from the table of settings and hints (table.h); the cclx_settings_doc tool
// writes it, and a test checks the committed file against it.
#include "core/settings/table.h"

namespace cclx::settings {

namespace {

std::string code(const std::string& s) { return "`" + s + "`"; }

std::string codeList(const Entry& e, const char* sep) {
  std::string s;
  for (const std::string& v : allowedValues(e)) s += (s.empty() ? "" : sep) + code(v);
  return s;
}

// The Values column: what the parser accepts.
std::string values(const Entry& e) {
  switch (e.kind) {
    case Kind::Choice: return codeList(e, ", ");
    case Kind::List: return "comma list of " + codeList(e, ", ");
    case Kind::RankStage: return "`<rank>:<stage>`, stage " + codeList(e, ", ");
    case Kind::Text: return "text";
    default: return validText(e);
  }
}

std::string name(const Entry& e) {
  std::string s = code(e.env);
  if (e.alias) s += " (else " + code(e.alias) + ")";
  return s;
}

std::string def(const Entry& e) {
  const std::string d = e.def;
  // Plain values in code font; prose ("unset", "from `_ENABLE`", "0 (tuned)") as written.
  if (d.find(' ') != std::string::npos || d == "unset" || d == "stderr" || d.find('`') != std::string::npos)
    return d;
  return code(d);
}

}  // namespace

std::string settingsMarkdown() {
  std::string md =
      "# Settings and hints\n\n"
      "<!-- Generated from src/core/settings/table.cc by the cclx_settings_doc tool; do not edit.\n"
      "     Regenerate: cmake --build build --target cclx_settings_doc && "
      "build/cclx_settings_doc docs/SETTINGS.md -->\n\n"
      "One table in the sources (`src/core/settings/table.cc`) holds every setting and hint: the "
      "environment is parsed by it (once, at the first use of cclx), hints are checked by it (at "
      "comm creation and at every call, before anything is enqueued), and every message about a "
      "bad value names the valid values from it. Python reads the hint keys with "
      "`cclx._C.hint_keys()` and each key's values with `cclx._C.hint_values(key)`.\n\n"
      "A malformed value is an error (`cclxInvalidArgument`, also reported to the other ranks), "
      "never silently ignored; an empty variable counts as unset; an unknown `CCLX_*` name draws "
      "one warning naming the closest known one. Sizes accept a `K`, `M` or `G` suffix (binary). "
      "Environment values are read in any case (`TREE` = `tree`); hint values are taken exactly "
      "as listed.\n\n"
      "## Settings\n\n"
      "Environment variables read by the library (`Config::fromEnv`). Where a setting has a hint, "
      "the hint takes the same values and, given on a call or a comm, overrides the setting.\n\n"
      "| Variable | Values | Default | Hint | Meaning |\n|---|---|---|---|---|\n";
  for (const Entry& e : table()) {
    if (!e.env || e.reader != Reader::Library) continue;
    md += "| " + name(e) + " | " + values(e) + " | " + def(e) + " | " +
          (e.hint ? code(e.hint) : std::string()) + " | " + e.doc + " |\n";
  }
  md +=
      "\n## Hints\n\n"
      "Keys of `Options::hints` (per comm) and `CollOptions::hints` (per call; Python: `hints=`); "
      "a per-call hint overrides the comm's. An unknown key or value is `cclxInvalidArgument`. "
      "Through torchcomms, keys prefixed `cclx.` or `cclx::` are always passed on, plain keys "
      "when they are listed here.\n\n"
      "| Hint | Values | Default | Setting | Meaning |\n|---|---|---|---|---|\n";
  for (const Entry& e : table()) {
    if (!e.hint) continue;
    md += "| " + code(e.hint) + " | " + values(e) + " | " + def(e) + " | " +
          (e.env ? code(e.env) : std::string()) + " | " + e.doc + " |\n";
  }
  md +=
      "\n## Read outside the library\n\n"
      "`CCLX_*` names the Python package, the build or the test scripts read; known to the "
      "library, so that setting them draws no warning.\n\n"
      "| Variable | Default | Meaning |\n|---|---|---|\n";
  for (const Entry& e : table()) {
    if (e.reader != Reader::Outside) continue;
    md += "| " + name(e) + " | " + def(e) + " | " + e.doc + " |\n";
  }
  return md;
}

}  // namespace cclx::settings
