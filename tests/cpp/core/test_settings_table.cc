// core/settings/table.h: every entry of the table of settings and hints parses its default and
// its documented values, rejects a bad value with a message naming the valid ones, and the
// settings that share values with a hint take the same values as the hint (and the selection
// takes them all).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/select/select.h"
#include "core/settings/config.h"
#include "core/settings/settings_check.h"
#include "core/settings/table.h"

using namespace cclx;
using settings::Entry;
using settings::Kind;

namespace {

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Every Config field a setting sets (the *Set flags aside: they record that a variable is set).
std::string fingerprint(const Config& c) {
  std::string s;
  for (SettingsScope sc : {SettingsScope::kHost, SettingsScope::kGpu, SettingsScope::kDropin})
    s += encodeSettings(layoutSettings(c, sc));
  s += std::to_string(int(c.logLevel)) + "|" + c.logFile + "|" + std::to_string(c.timeoutMs) +
       "|" + std::to_string(c.defaultTimeoutMs) + "|" + std::to_string(c.abortOnError) + "|" +
       std::to_string(c.watchdog) + "|" + c.jobId + "|" + c.storeToken + "|" +
       c.mpsThreadPercent + "|" + c.torchcommsRoute + "|" + std::to_string(c.spinIterations) +
       "|" + c.ncclPath + "|" + c.ncclPipDir + "|" + std::to_string(c.winPutCeMinBytes) + "|" +
       std::to_string(c.fp8ProducerWarps) + "|" + std::to_string(c.dropinShared) + "|" +
       std::to_string(c.testSetupFailRank) + "|" + c.testSetupFailStage;
  return s;
}

// The documented default as a value to set: its first word ("0 (tuned)" -> "0"); "" where the
// default is not a value (unset, from another setting, set by someone else).
std::string defaultValue(const Entry& e) {
  std::string d = e.def;
  d = d.substr(0, d.find(' '));
  if (d == "unset" || d == "from" || d == "set" || d == "stderr") return "";
  return d;
}

// Values the entry documents as valid.
std::vector<std::string> validSamples(const Entry& e) {
  const std::string lo = std::to_string(e.lo), hi = std::to_string(e.hi);
  std::vector<std::string> all;
  switch (e.kind) {
    case Kind::Bool: return {"1", "0", "true", "false", "on", "off", "yes", "no", "TRUE"};
    case Kind::Size: return {lo, "4K", "64k", "2MiB", "1G", std::to_string(e.lo + 1)};
    case Kind::Int: return {lo, hi};
    case Kind::Pow2: return {lo, hi};
    case Kind::Seconds: return {"0", "2.5", "600", "1e9"};
    case Kind::Choice:
      for (const std::string& v : settings::allowedValues(e)) {
        all.push_back(v);
        std::string up = v;
        for (char& ch : up) ch = char(std::toupper(static_cast<unsigned char>(ch)));
        all.push_back(up);  // environment values in any case
      }
      return all;
    case Kind::List: {
      std::string joined;
      for (const std::string& v : settings::allowedValues(e)) {
        all.push_back(v);
        joined += v + " , ";
      }
      all.push_back(joined);
      return all;
    }
    case Kind::AutoBool: return {"auto", "AUTO", "1", "0", "on", "no"};
    case Kind::RankStage:
      for (const std::string& v : settings::allowedValues(e)) all.push_back(lo + ":" + v);
      all.push_back(hi + ":" + settings::allowedValues(e)[0]);
      return all;
    case Kind::Text: return {"some text", "/a/path"};
  }
  return all;
}

// Values no entry of that kind takes.
std::vector<std::string> badSamples(const Entry& e) {
  const std::string lo = std::to_string(e.lo), hi = std::to_string(e.hi);
  switch (e.kind) {
    case Kind::Bool: return {"maybe", "2", "y e s"};
    case Kind::Size:
      if (e.lo > 0) return {"-1", "12Q", std::to_string(e.lo - 1)};
      return {"-1", "12Q", "99999999999999999999999"};
    case Kind::Int: return {"many", "12abc", std::to_string(e.lo - 1), std::to_string(e.hi + 1)};
    case Kind::Pow2: return {"x", std::to_string(e.lo + 1), std::to_string(e.hi * 2)};
    case Kind::Seconds: return {"-1", "ten", "2e9"};
    case Kind::Choice: return {"bogus", "auto|flat"};
    case Kind::List: return {"bogus", std::string(settings::allowedValues(e)[0]) + ",bogus"};
    case Kind::AutoBool: return {"sometimes", "2"};
    case Kind::RankStage: return {"0", "x:" + settings::allowedValues(e)[0], lo + ":bogus",
                                  std::to_string(e.hi + 1) + ":" + settings::allowedValues(e)[0]};
    case Kind::Text: return {};
  }
  return {};
}

class SettingsTable : public ::testing::Test {
 protected:
  void SetUp() override { clearAll(); }
  void TearDown() override {
    clearAll();
    reloadConfig();
  }
  static void clearAll() {
    for (const Entry& e : settings::table())
      for (const char* n : {e.env, e.alias})
        if (n) unsetenv(n);
  }
};

TEST_F(SettingsTable, NamesAreUnique) {
  std::set<std::string> names, hints;
  for (const Entry& e : settings::table()) {
    ASSERT_TRUE(e.env || e.hint);
    ASSERT_TRUE(e.doc && *e.doc && e.def && *e.def) << (e.env ? e.env : e.hint);
    for (const char* n : {e.env, e.alias})
      if (n) EXPECT_TRUE(names.insert(n).second) << n;
    if (e.hint) EXPECT_TRUE(hints.insert(e.hint).second) << e.hint;
    if (e.kind == Kind::Choice || e.kind == Kind::List || e.kind == Kind::RankStage)
      EXPECT_FALSE(settings::allowedValues(e).empty()) << (e.env ? e.env : e.hint);
    if (e.reader == settings::Reader::Library && e.env) EXPECT_NE(e.set, nullptr) << e.env;
  }
  // The known-name list is the table's CCLX_* names.
  for (const std::string& n : knownEnvNames()) EXPECT_TRUE(names.count(n)) << n;
  for (const std::string& n : names)
    if (n.rfind("CCLX_", 0) == 0)
      EXPECT_NE(std::find(knownEnvNames().begin(), knownEnvNames().end(), n), knownEnvNames().end())
          << n;
}

TEST_F(SettingsTable, EveryEntryParsesItsDefaultAndItsValues) {
  const std::string plain = fingerprint(Config::fromEnv());
  EXPECT_EQ(plain, fingerprint(Config()));
  for (const Entry& e : settings::table()) {
    if (!e.env || !e.set) continue;
    SCOPED_TRACE(e.env);
    const std::string d = defaultValue(e);
    if (!d.empty()) {  // the documented default is what an unset variable gives
      setenv(e.env, d.c_str(), 1);
      EXPECT_EQ(fingerprint(Config::fromEnv()), plain) << e.env << "=" << d;
    }
    for (const std::string& v : validSamples(e)) {
      setenv(e.env, v.c_str(), 1);
      EXPECT_NO_THROW(Config::fromEnv()) << e.env << "=" << v;
      if (e.alias) {  // the alias takes the same values, and the name wins over it
        unsetenv(e.env);
        setenv(e.alias, v.c_str(), 1);
        EXPECT_NO_THROW(Config::fromEnv()) << e.alias << "=" << v;
        unsetenv(e.alias);
      }
    }
    unsetenv(e.env);
  }
}

TEST_F(SettingsTable, BadValuesAreRejectedNamingTheValidOnes) {
  size_t checked = 0;
  for (const Entry& e : settings::table()) {
    if (!e.env || !e.set) continue;
    for (const std::string& v : badSamples(e)) {
      SCOPED_TRACE(std::string(e.env) + "=" + v);
      setenv(e.env, v.c_str(), 1);
      try {
        Config::fromEnv();
        ADD_FAILURE() << "accepted";
      } catch (const Error& err) {
        const std::string m = err.what();
        EXPECT_EQ(err.code(), cclxInvalidArgument);
        EXPECT_TRUE(has(m, e.env)) << m;
        if (e.kind == Kind::Choice || e.kind == Kind::List || e.kind == Kind::RankStage) {
          for (const std::string& a : settings::allowedValues(e)) EXPECT_TRUE(has(m, a)) << m;
        } else if (!has(m, "out of range") && !has(m, "suffix")) {
          EXPECT_TRUE(has(m, settings::validText(e))) << m;
        }
        ++checked;
      }
      unsetenv(e.env);
    }
  }
  EXPECT_GT(checked, 80u);
  // The fixed messages other tests and users see.
  setenv("CCLX_ALLREDUCE_ALGO", "ring", 1);
  try {
    Config::fromEnv();
  } catch (const Error& err) {
    EXPECT_STREQ(err.what(),
                 "CCLX_ALLREDUCE_ALGO='ring' is not one of auto, base, flat, lamport, tree, ll, "
                 "pipelined, nccl, dda");
  }
}

TEST_F(SettingsTable, HintsTakeTheirValuesAndNameTheValidOnes) {
  const std::vector<std::string> keys = settings::hintKeys();
  ASSERT_FALSE(keys.empty());
  for (const std::string& k : keys) {
    const Entry& e = *settings::findHint(k);
    for (const std::string& v : settings::allowedValues(e)) EXPECT_NO_THROW(checkHints({{k, v}}));
    try {
      checkHints({{k, "bogus"}});
      ADD_FAILURE() << k << "=bogus accepted";
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), cclxInvalidArgument);
      EXPECT_EQ(std::string(err.what()), "hint " + k + "='bogus' is not " + settings::validText(e));
    }
    EXPECT_THROW(checkHints({{k, ""}}), Error);
  }
  try {
    checkHints({{"nope", "1"}});
    ADD_FAILURE();
  } catch (const Error& err) {
    for (const std::string& k : keys) EXPECT_TRUE(has(err.what(), k)) << err.what();
  }
}

// A setting with a hint takes exactly the hint's values (CCLX_ALLREDUCE_ALGO=dda as "algo": "dda"),
// and the selection runs every one of them, from the setting and from the hint.
TEST_F(SettingsTable, SettingsAndTheirHintsAgree) {
  size_t pairs = 0;
  for (const Entry& e : settings::table()) {
    if (!e.env || !e.hint) continue;
    ++pairs;
    for (const std::string& v : settings::allowedValues(e)) {
      SCOPED_TRACE(std::string(e.env) + "=" + v);
      setenv(e.env, v.c_str(), 1);
      Config cfg;
      ASSERT_NO_THROW(cfg = Config::fromEnv());
      EXPECT_NO_THROW(checkHints({{e.hint, v}}));
      for (CollType t : {CollType::AllReduce, CollType::AllGather, CollType::AllReduceRmsNorm}) {
        CollArgs a;
        a.type = t;
        a.dtype = DataType::bf16;
        a.count = 1 << 20;
        a.rms.tokens = 16;
        a.rms.hidden = 4096;
        a.rms.dtype = DataType::bf16;
        Caps c;
        c.worldSize = 2;
        c.nccl = c.peer = true;
        for (const AlgoRow& r : algorithms()) c.allow(r.id, true);
        EXPECT_NO_THROW(select(a, cfg, c));
        a.opts.hints[e.hint] = v;
        EXPECT_NO_THROW(select(a, Config(), c));
      }
      unsetenv(e.env);
    }
  }
  EXPECT_GE(pairs, 3u);
  setenv("CCLX_ALLREDUCE_ALGO", "dda", 1);
  EXPECT_EQ(Config::fromEnv().allreduceAlgo, "dda");
}

TEST_F(SettingsTable, MarkdownListsEveryEntry) {
  const std::string md = settings::settingsMarkdown();
  for (const Entry& e : settings::table()) {
    if (e.env) EXPECT_TRUE(has(md, "| `" + std::string(e.env) + "`")) << e.env;
    if (e.hint) EXPECT_TRUE(has(md, "| `" + std::string(e.hint) + "` |")) << e.hint;
    EXPECT_TRUE(has(md, e.doc)) << e.doc;
  }
}

}  // namespace
