// CCLX_* parsing: defaults, accepted spellings, and malformed values rejected with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include <unistd.h>
#include <cstdio>

#include <cclx/cclx.hpp>

#include "core/settings/config.h"

namespace {

const char* kVars[] = {"CCLX_DEBUG", "CCLX_DEBUG_FILE", "CCLX_CHECK_MODE", "CCLX_TIMEOUT_MS",
                       "CCLX_JOB_ID", "TORCHELASTIC_RUN_ID", "CCLX_SHM_FLAT_MAX_BYTES",
                       "CCLX_SHM_CHUNK_BYTES", "CCLX_SPIN_ITERATIONS", "CCLX_NCCL_PATH",
                       "CCLX_ALLREDUCE_ALGO", "CCLX_DDA_ENABLE", "CCLX_DDA_FLAT_MAX_BYTES",
                       "CCLX_DDA_TREE_MAX_BYTES", "CCLX_DDA_LAMPORT_MAX_BYTES",
                       "CCLX_DDA_STAGING_BYTES", "CCLX_DDA_MAX_BLOCKS",
                       "CCLX_LOW_PRECISION_ENABLE", "CCLX_LOW_PRECISION_ALLREDUCE",
                       "CCLX_LOW_PRECISION_ALLGATHER", "CCLX_LOW_PRECISION_REDUCESCATTER",
                       "CCLX_LOW_PRECISION_ALLTOALL", "CCLX_LOW_PRECISION_MIN_BYTES",
                       "CCLX_FP8_BLOCK_SIZE", "CCLX_FP8_PRODUCER_WARPS", "CCLX_FP8_TILES_PER_CTA",
                       "CCLX_FP8_ALLREDUCE_ALGO", "CCLX_FP8_ONESHOT_MAX_BYTES",
                       "CCLX_NCCL_INTERCEPT", "CCLX_NCCL_FORWARD", "CCLX_TIMEOUT",
                       "TORCHCOMM_TIMEOUT_SECONDS", "CCLX_ABORT_ON_ERROR",
                       "TORCHCOMM_ABORT_ON_ERROR", "CCLX_TORCHCOMMS_ROUTE"};

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) unsetenv(v);
  }
  void TearDown() override {
    for (const char* v : kVars) unsetenv(v);
    cclx::reloadConfig();
  }
  static void set(const char* k, const char* v) { ASSERT_EQ(setenv(k, v, 1), 0); }
  static std::string rejected(const char* k, const char* v) {
    setenv(k, v, 1);
    try {
      cclx::Config::fromEnv();
    } catch (const cclx::Error& e) {
      unsetenv(k);
      EXPECT_EQ(e.code(), cclxInvalidArgument) << e.what();
      return e.what();
    }
    unsetenv(k);
    ADD_FAILURE() << k << "=" << v << " was accepted";
    return "";
  }
};

TEST_F(ConfigTest, Defaults) {
  cclx::Config c = cclx::Config::fromEnv();
  cclx::Config d;
  EXPECT_EQ(c.logLevel, cclx::LogLevel::WARN);  // warnings are shown unless CCLX_DEBUG=NONE
  EXPECT_FALSE(c.checkMode);
  EXPECT_EQ(c.timeoutMs, -1);
  EXPECT_EQ(c.jobId, "cclx");
  EXPECT_EQ(c.shmFlatMaxBytes, d.shmFlatMaxBytes);
  EXPECT_EQ(c.shmChunkBytes, d.shmChunkBytes);
  EXPECT_EQ(c.allreduceAlgo, "auto");
  EXPECT_TRUE(c.ddaEnable);
  EXPECT_FALSE(c.lpAllReduce || c.lpAllGather || c.lpReduceScatter || c.lpAllToAll);
  EXPECT_EQ(c.fp8BlockSize, 128);
  EXPECT_EQ(c.fp8ProducerWarps, 0);
  EXPECT_EQ(c.fp8TilesPerCta, 1);
}

TEST_F(ConfigTest, ParsesValues) {
  set("CCLX_DEBUG", "info");
  set("CCLX_CHECK_MODE", "1");
  set("CCLX_TIMEOUT_MS", "2500");
  set("CCLX_SHM_FLAT_MAX_BYTES", "128K");
  set("CCLX_SHM_CHUNK_BYTES", "2MiB");
  set("CCLX_SPIN_ITERATIONS", "17");
  set("CCLX_ALLREDUCE_ALGO", "TREE");
  set("CCLX_DDA_ENABLE", "off");
  set("CCLX_DDA_STAGING_BYTES", "1G");
  set("CCLX_DDA_LAMPORT_MAX_BYTES", "8M");
  set("CCLX_DDA_MAX_BLOCKS", "24");
  set("CCLX_FP8_BLOCK_SIZE", "64");
  set("CCLX_FP8_PRODUCER_WARPS", "12");
  set("CCLX_FP8_TILES_PER_CTA", "8");
  set("CCLX_LOW_PRECISION_MIN_BYTES", "1048576");
  set("CCLX_FP8_ALLREDUCE_ALGO", "TwoShot");
  set("CCLX_FP8_ONESHOT_MAX_BYTES", "32M");
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_EQ(c.logLevel, cclx::LogLevel::INFO);
  EXPECT_TRUE(c.checkMode);
  EXPECT_EQ(c.timeoutMs, 2500);
  EXPECT_EQ(c.shmFlatMaxBytes, 128u << 10);
  EXPECT_EQ(c.shmChunkBytes, 2u << 20);
  EXPECT_EQ(c.spinIterations, 17);
  EXPECT_EQ(c.allreduceAlgo, "tree");
  EXPECT_FALSE(c.ddaEnable);
  EXPECT_EQ(c.ddaStagingBytes, 1ull << 30);
  EXPECT_EQ(c.ddaLamportMaxBytes, 8ull << 20);
  EXPECT_EQ(c.ddaMaxBlocks, 24);
  EXPECT_EQ(c.fp8BlockSize, 64);
  EXPECT_EQ(c.fp8ProducerWarps, 12);
  EXPECT_EQ(c.fp8TilesPerCta, 8);
  EXPECT_EQ(c.lpMinBytes, 1048576u);
  EXPECT_EQ(c.fp8AllReduceAlgo, "twoshot");
  EXPECT_EQ(c.fp8OneShotMaxBytes, 32ull << 20);
}

TEST_F(ConfigTest, LowPrecisionSwitches) {
  set("CCLX_LOW_PRECISION_ENABLE", "1");
  set("CCLX_LOW_PRECISION_ALLTOALL", "0");
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_TRUE(c.lpAllReduce && c.lpAllGather && c.lpReduceScatter);
  EXPECT_FALSE(c.lpAllToAll);
  unsetenv("CCLX_LOW_PRECISION_ENABLE");
  set("CCLX_LOW_PRECISION_REDUCESCATTER", "true");
  c = cclx::Config::fromEnv();
  EXPECT_TRUE(c.lpReduceScatter);
  EXPECT_FALSE(c.lpAllReduce || c.lpAllGather || c.lpAllToAll);
}

TEST_F(ConfigTest, NcclDropinSettings) {
  cclx::Config d = cclx::Config::fromEnv();
  EXPECT_TRUE(d.ncclIntercept);
  EXPECT_EQ(d.ncclForward, 0u);
  set("CCLX_NCCL_INTERCEPT", "off");
  set("CCLX_NCCL_FORWARD", " AllReduce, alltoall ,");
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_FALSE(c.ncclIntercept);
  EXPECT_EQ(c.ncclForward, unsigned(cclx::kForwardAllReduce | cclx::kForwardAllToAll));
  set("CCLX_NCCL_FORWARD", "all");
  EXPECT_EQ(cclx::Config::fromEnv().ncclForward,
            unsigned(cclx::kForwardAllReduce | cclx::kForwardAllGather |
                     cclx::kForwardReduceScatter | cclx::kForwardAllToAll));
  unsetenv("CCLX_NCCL_FORWARD");
  EXPECT_NE(rejected("CCLX_NCCL_FORWARD", "allreduce,bcast").find("'bcast'"), std::string::npos);
  EXPECT_NE(rejected("CCLX_NCCL_INTERCEPT", "maybe").find("CCLX_NCCL_INTERCEPT"), std::string::npos);
}

TEST_F(ConfigTest, JobIdSources) {
  set("TORCHELASTIC_RUN_ID", "elastic-7");
  EXPECT_EQ(cclx::Config::fromEnv().jobId, "elastic-7");
  set("CCLX_JOB_ID", "mine");
  EXPECT_EQ(cclx::Config::fromEnv().jobId, "mine");
}

TEST_F(ConfigTest, RejectsMalformedValues) {
  EXPECT_NE(rejected("CCLX_DEBUG", "LOUD").find("CCLX_DEBUG"), std::string::npos);
  EXPECT_NE(rejected("CCLX_CHECK_MODE", "maybe").find("maybe"), std::string::npos);
  rejected("CCLX_TIMEOUT_MS", "12abc");
  rejected("CCLX_TIMEOUT_MS", "-5");
  rejected("CCLX_SHM_FLAT_MAX_BYTES", "-1");
  rejected("CCLX_SHM_FLAT_MAX_BYTES", "12Q");
  rejected("CCLX_SHM_FLAT_MAX_BYTES", "99999999999999999999999");
  rejected("CCLX_SHM_CHUNK_BYTES", "100");
  rejected("CCLX_SPIN_ITERATIONS", "many");
  rejected("CCLX_ALLREDUCE_ALGO", "ring");
  rejected("CCLX_FP8_ALLREDUCE_ALGO", "ring");
  rejected("CCLX_DDA_ENABLE", "2");
  rejected("CCLX_DDA_MAX_BLOCKS", "5000");
  rejected("CCLX_FP8_BLOCK_SIZE", "100");
  rejected("CCLX_FP8_BLOCK_SIZE", "512");
  rejected("CCLX_FP8_PRODUCER_WARPS", "16");
  rejected("CCLX_FP8_TILES_PER_CTA", "0");
  rejected("CCLX_LOW_PRECISION_ENABLE", "y e s");
}

TEST_F(ConfigTest, EmptyMeansUnset) {
  set("CCLX_TIMEOUT_MS", "");
  set("CCLX_DEBUG", "");
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_EQ(c.timeoutMs, -1);
  EXPECT_EQ(c.logLevel, cclx::LogLevel::WARN);
  set("CCLX_DEBUG", "none");
  EXPECT_EQ(cclx::Config::fromEnv().logLevel, cclx::LogLevel::NONE);
}

TEST_F(ConfigTest, RendezvousSettingsSurviveAMalformedOne) {
  set("CCLX_JOB_ID", "job-7");
  set("CCLX_TIMEOUT_MS", "4000");
  set("CCLX_SPIN_ITERATIONS", "many");
  EXPECT_THROW(cclx::reloadConfig(), cclx::Error);
  cclx::RendezvousConfig r = cclx::rendezvousConfig();
  EXPECT_EQ(r.jobId, "job-7");
  EXPECT_EQ(r.timeoutMs, 4000);
  EXPECT_EQ(r.error, "CCLX_SPIN_ITERATIONS='many' is not an integer in [0, 1073741824]");
  set("CCLX_TIMEOUT_MS", "abc");
  r = cclx::rendezvousConfig();
  EXPECT_EQ(r.timeoutMs, -1);
  EXPECT_NE(r.error.find("CCLX_"), std::string::npos) << r.error;
}

TEST_F(ConfigTest, UnknownNamesSuggestTheClosestKnownOne) {
  char a[] = "CCLX_TIMEOUTMS=5", b[] = "CCLX_DEBUG=INFO", c[] = "CCLX_LOW_PRECISON_ENABLE=1",
       d[] = "PATH=/bin", e[] = "CCLX_EXT_DIR=/x", f[] = "CCLX_TEST_ONLY=a";
  char* env[] = {a, b, c, d, e, f, nullptr};
  auto w = cclx::unknownEnvNames(env);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0], "CCLX_LOW_PRECISON_ENABLE (did you mean CCLX_LOW_PRECISION_ENABLE?)");
  EXPECT_EQ(w[1], "CCLX_TIMEOUTMS (did you mean CCLX_TIMEOUT_MS?)");
  // Every name the sources read is known (settings, scripts, tests).
  for (const char* n : kVars)
    if (std::string(n).rfind("CCLX_", 0) == 0)
      EXPECT_NE(std::find(cclx::knownEnvNames().begin(), cclx::knownEnvNames().end(), n),
                cclx::knownEnvNames().end()) << n;
}

// Every CCLX_* name the parser reads is known, so that setting it never draws the warning
// "unknown setting ...; it is ignored" (found by tests/fuzz/fuzz_settings.cc: the fused, DDA
// exchange, window and test-failure settings were missing).
TEST_F(ConfigTest, EveryNameTheParserReadsIsKnown) {
  const std::string src = std::string(CCLX_SOURCE_DIR) + "/src/core/settings/table.cc";
  std::FILE* f = std::fopen(src.c_str(), "r");
  ASSERT_NE(f, nullptr) << src;
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), f)) > 0;) text.append(buf, n);
  std::fclose(f);
  const auto& known = cclx::knownEnvNames();
  size_t names = 0;
  // Every string literal that is a whole CCLX_ name ("CCLX_X", not "CCLX_X=%s ..." messages).
  for (size_t at = 0; (at = text.find("\"CCLX_", at)) != std::string::npos; ++at) {
    size_t end = at + 6;
    while (end < text.size() && (std::isupper(static_cast<unsigned char>(text[end])) ||
                                 std::isdigit(static_cast<unsigned char>(text[end])) ||
                                 text[end] == '_'))
      ++end;
    if (end == at + 6 || end >= text.size() || text[end] != '"') continue;
    const std::string name = text.substr(at + 1, end - at - 1);
    ++names;
    EXPECT_NE(std::find(known.begin(), known.end(), name), known.end()) << name;
    std::string entry = name + "=1";
    char* env[] = {entry.data(), nullptr};
    EXPECT_TRUE(cclx::unknownEnvNames(env).empty()) << name;
  }
  EXPECT_GT(names, 40u);
}

TEST_F(ConfigTest, ReloadPicksUpChangesAndKeepsOldOnError) {
  set("CCLX_SPIN_ITERATIONS", "5");
  cclx::reloadConfig();
  EXPECT_EQ(cclx::config().spinIterations, 5);
  set("CCLX_SPIN_ITERATIONS", "oops");
  EXPECT_THROW(cclx::reloadConfig(), cclx::Error);
  EXPECT_EQ(cclx::config().spinIterations, 5);
}

TEST_F(ConfigTest, TorchcommsRoute) {
  cclx::reloadConfig();
  EXPECT_EQ(cclx::config().torchcommsRoute, "auto");
  set("CCLX_TORCHCOMMS_ROUTE", "CXX");
  cclx::reloadConfig();
  EXPECT_EQ(cclx::config().torchcommsRoute, "cxx");
  set("CCLX_TORCHCOMMS_ROUTE", "python");
  cclx::reloadConfig();
  EXPECT_EQ(cclx::config().torchcommsRoute, "python");
  set("CCLX_TORCHCOMMS_ROUTE", "c++");
  EXPECT_THROW(cclx::reloadConfig(), cclx::Error);
}

TEST_F(ConfigTest, LogLinesCarryThePrefix) {
  std::string path = ::testing::TempDir() + "cclx_log_%p.txt";
  set("CCLX_DEBUG", "INFO");
  set("CCLX_DEBUG_FILE", path.c_str());
  cclx::reloadConfig();
  {
    auto server = cclx::TcpStore::create("127.0.0.1", 0, true, "log", std::chrono::seconds(5));
    cclx::Options o;
    o.name = "logged";
    auto comm = cclx::Comm::create(cclx::DeviceSpec::cpu(), o, server, 0, 1);
    comm->finalize();
  }
  std::string real = ::testing::TempDir() + "cclx_log_" + std::to_string(getpid()) + ".txt";
  FILE* f = std::fopen(real.c_str(), "r");
  ASSERT_NE(f, nullptr) << real;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  std::remove(real.c_str());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string prefix = std::string(host) + ":" + std::to_string(getpid()) + ":";
  EXPECT_NE(text.find(prefix), std::string::npos) << text;
  EXPECT_NE(text.find("[0] CCLX INFO comm 'logged'"), std::string::npos) << text;
}

// torchcomms' defaults: abort on a timeout or error, 600 s; CCLX_* first, then TORCHCOMM_*;
// a timeout of 0 seconds means none.
TEST_F(ConfigTest, TimeoutAndAbortDefaults) {
  cclx::Config c = cclx::Config::fromEnv();
  EXPECT_TRUE(c.abortOnError);
  EXPECT_FALSE(c.abortOnErrorSet);
  EXPECT_EQ(c.defaultTimeoutMs, 600000);
  set("TORCHCOMM_ABORT_ON_ERROR", "0");
  set("TORCHCOMM_TIMEOUT_SECONDS", "2.5");
  c = cclx::Config::fromEnv();
  EXPECT_FALSE(c.abortOnError);
  EXPECT_TRUE(c.abortOnErrorSet);
  EXPECT_EQ(c.defaultTimeoutMs, 2500);
  set("CCLX_ABORT_ON_ERROR", "on");
  set("CCLX_TIMEOUT", "0");
  c = cclx::Config::fromEnv();
  EXPECT_TRUE(c.abortOnError);
  EXPECT_EQ(c.defaultTimeoutMs, 0);
  cclx::reloadConfig();
  EXPECT_EQ(cclx::defaultTimeout(), cclx::kInfiniteTimeout);
  set("CCLX_TIMEOUT", "7");
  cclx::reloadConfig();
  EXPECT_EQ(cclx::defaultTimeout(), std::chrono::milliseconds(7000));
  set("CCLX_TIMEOUT_MS", "1234");  // overrides every comm's timeout
  cclx::reloadConfig();
  EXPECT_EQ(cclx::defaultTimeout(), std::chrono::milliseconds(1234));
  EXPECT_NE(rejected("CCLX_TIMEOUT", "-1").find("CCLX_TIMEOUT"), std::string::npos);
  EXPECT_NE(rejected("TORCHCOMM_TIMEOUT_SECONDS", "ten").find("TORCHCOMM_TIMEOUT_SECONDS"),
            std::string::npos);
  EXPECT_NE(rejected("CCLX_ABORT_ON_ERROR", "maybe").find("CCLX_ABORT_ON_ERROR"), std::string::npos);
}

}  // namespace
