// Every invalid argument is rejected with the right code before anything is written, and the
// comm stays usable afterwards; use after finalize/abort is cclxInvalidUsage.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "core/settings/config.h"

#include "helpers/mp.h"

using namespace std::chrono_literals;
using cclx::DataType;
using cclx::RedOpKind;

namespace {

constexpr float kPoison = -12345.25f;

template <typename F>
cclxResult_t codeOf(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const cclx::Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
  return cclxSuccess;
}

#define EXPECT_CODE(code, stmt)                                                         \
  do {                                                                                  \
    std::string m_;                                                                     \
    cclxResult_t rc_ = codeOf([&] { stmt; }, &m_);                                      \
    MP_CHECK(rc_ == (code), "%s gave code %d (%s), want %d", #stmt, int(rc_), m_.c_str(), \
             int(code));                                                                \
    MP_CHECK(rc_ == cclxSuccess || !m_.empty(), "%s: empty error message", #stmt);      \
  } while (0)

bool allPoison(const std::vector<float>& v) {
  for (float x : v)
    if (std::memcmp(&x, &kPoison, sizeof(float)) != 0) return false;
  return true;
}

void badCalls(cclx::Comm& c, int rank, int size) {
  const size_t n = 64;
  std::vector<float> send(n * size_t(size), 1.5f), recv(n * size_t(size), kPoison);
  std::vector<float> sendCopy = send;
  float* r = recv.data();
  const float* s = send.data();
  const auto f32 = DataType::f32;
  const size_t huge = std::numeric_limits<size_t>::max() / 2;

  EXPECT_CODE(cclxInvalidArgument, c.allReduce(nullptr, r, n, f32, RedOpKind::SUM));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, nullptr, n, f32, RedOpKind::SUM));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, DataType(99), RedOpKind::SUM));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, DataType(-1), RedOpKind::SUM));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, f32, RedOpKind(42)));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, f32, RedOpKind::BAND));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, f32, RedOpKind::BXOR));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, DataType::fp8_e4m3, RedOpKind::SUM));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, DataType::fp8_e5m2, RedOpKind::MAX));
  EXPECT_CODE(cclxInvalidArgument,
              c.allReduce(s, r, n, f32, cclx::ReduceOp::premulSum(std::nan(""))));
  EXPECT_CODE(cclxInvalidArgument,
              c.allReduce(s, r, n, f32, cclx::ReduceOp::premulSum(INFINITY)));
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, huge, f32, RedOpKind::SUM));
  cclx::CollOptions neg;
  neg.timeout = std::chrono::milliseconds(-1);
  EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, f32, RedOpKind::SUM, neg));

  EXPECT_CODE(cclxInvalidArgument, c.reduce(s, r, n, f32, RedOpKind::SUM, -1));
  EXPECT_CODE(cclxInvalidArgument, c.reduce(s, r, n, f32, RedOpKind::SUM, size));
  EXPECT_CODE(cclxInvalidArgument, c.reduce(nullptr, r, n, f32, RedOpKind::SUM, 0));
  if (rank == 0) EXPECT_CODE(cclxInvalidArgument, c.reduce(s, nullptr, n, f32, RedOpKind::SUM, 0));
  EXPECT_CODE(cclxInvalidArgument, c.broadcast(s, r, n, f32, size));
  EXPECT_CODE(cclxInvalidArgument, c.broadcast(s, r, n, f32, -3));
  EXPECT_CODE(cclxInvalidArgument, c.broadcast(s, nullptr, n, f32, 0));
  if (rank == 0) EXPECT_CODE(cclxInvalidArgument, c.broadcast(nullptr, r, n, f32, 0));

  EXPECT_CODE(cclxInvalidArgument, c.allGather(nullptr, r, n, f32));
  EXPECT_CODE(cclxInvalidArgument, c.allGather(s, nullptr, n, f32));
  EXPECT_CODE(cclxInvalidArgument, c.allGather(s, r, huge, f32));
  std::vector<void*> shortList(size_t(size) - 1, r);
  EXPECT_CODE(cclxInvalidArgument, c.allGatherList(s, shortList, n, f32));
  std::vector<void*> nullList(size_t(size), r);
  nullList.back() = nullptr;
  EXPECT_CODE(cclxInvalidArgument, c.allGatherList(s, nullList, n, f32));

  EXPECT_CODE(cclxInvalidArgument, c.reduceScatter(s, r, n, f32, RedOpKind::BOR));
  EXPECT_CODE(cclxInvalidArgument, c.reduceScatter(nullptr, r, n, f32, RedOpKind::SUM));
  std::vector<const void*> sends(size_t(size) + 1, s);
  EXPECT_CODE(cclxInvalidArgument, c.reduceScatterList(sends, r, n, f32, RedOpKind::SUM));

  EXPECT_CODE(cclxInvalidArgument, c.allToAll(s, nullptr, n, f32));
  std::vector<size_t> counts(size_t(size), 2), shortCounts(size_t(size) - 1, 2);
  EXPECT_CODE(cclxInvalidArgument, c.allToAllV(s, shortCounts, r, counts, f32));
  EXPECT_CODE(cclxInvalidArgument, c.allToAllV(s, counts, r, shortCounts, f32));
  EXPECT_CODE(cclxInvalidArgument, c.allToAllV(nullptr, counts, r, counts, f32));
  std::vector<size_t> hugeCounts(size_t(size), huge);
  EXPECT_CODE(cclxInvalidArgument, c.allToAllV(s, hugeCounts, r, counts, f32));

  EXPECT_CODE(cclxInvalidArgument, c.send(s, n, f32, rank));
  EXPECT_CODE(cclxInvalidArgument, c.send(s, n, f32, size));
  EXPECT_CODE(cclxInvalidArgument, c.send(s, n, f32, -1));
  EXPECT_CODE(cclxInvalidArgument, c.send(nullptr, n, f32, (rank + 1) % size));
  EXPECT_CODE(cclxInvalidArgument, c.recv(r, n, f32, rank));
  EXPECT_CODE(cclxInvalidArgument, c.recv(nullptr, n, f32, (rank + 1) % size));

  EXPECT_CODE(cclxInvalidArgument, c.split({}, "empty"));
  EXPECT_CODE(cclxInvalidArgument, c.split({0, 0}, "dup"));
  EXPECT_CODE(cclxInvalidArgument, c.split({0, size}, "range"));
  EXPECT_CODE(cclxInvalidArgument, c.split({0}, ""));
  EXPECT_CODE(cclxInvalidArgument, c.selectAllReduceAlgo(n, f32, RedOpKind::BAND));

  // Hints: an unknown key or value fails every collective before anything runs.
  const std::map<std::string, std::string> badHints[] = {
      {{"algoo", "tree"}}, {{"low_precision", "fp4"}}, {{"fp8_algo", "bogus"}},
      {{"algo", "bogus"}}, {{"algo", "tree"}, {"note", "x"}}};
  const int peer = (rank + 1) % size;
  for (const auto& h : badHints) {
    cclx::CollOptions o;
    o.hints = h;
    EXPECT_CODE(cclxInvalidArgument, c.allReduce(s, r, n, f32, RedOpKind::SUM, o));
    EXPECT_CODE(cclxInvalidArgument, c.reduce(s, r, n, f32, RedOpKind::SUM, 0, o));
    EXPECT_CODE(cclxInvalidArgument, c.broadcast(s, r, n, f32, 0, o));
    EXPECT_CODE(cclxInvalidArgument, c.allGather(s, r, n, f32, o));
    EXPECT_CODE(cclxInvalidArgument, c.reduceScatter(s, r, n, f32, RedOpKind::SUM, o));
    EXPECT_CODE(cclxInvalidArgument, c.allToAll(s, r, n, f32, o));
    EXPECT_CODE(cclxInvalidArgument, c.allToAllV(s, counts, r, counts, f32, o));
    EXPECT_CODE(cclxInvalidArgument, c.send(s, n, f32, peer, o));
    EXPECT_CODE(cclxInvalidArgument, c.recv(r, n, f32, peer, o));
    EXPECT_CODE(cclxInvalidArgument, c.barrier(o));
    EXPECT_CODE(cclxInvalidArgument, c.selectAllReduceAlgo(n, f32, RedOpKind::SUM, o));
  }
  std::string m;
  cclx::CollOptions typo;
  typo.hints = {{"algoo", "tree"}};
  codeOf([&] { c.allGather(s, r, n, f32, typo); }, &m);
  MP_CHECK(m == "unknown hint 'algoo' (valid hints: algo, low_precision, fp8_algo, fused_algo, put_path)", "%s",
           m.c_str());
  typo.hints = {{"low_precision", "fp4"}};
  codeOf([&] { c.allReduce(s, r, n, f32, RedOpKind::SUM, typo); }, &m);
  MP_CHECK(m == "hint low_precision='fp4' is not one of fp8, off", "%s", m.c_str());
  codeOf([&] { c.send(s, n, f32, rank); }, &m);
  MP_CHECK(m == "send: peer " + std::to_string(rank) + " is this rank", "%s", m.c_str());

  MP_CHECK(allPoison(recv), "a rejected call wrote to the output");
  MP_CHECK(send == sendCopy, "a rejected call wrote to the input");
}

// A valid allreduce on random data, compared with a float64 reference.
void goodAllReduce(cclx::Comm& c, int rank, int size, uint32_t seed) {
  const size_t n = 1000;
  auto input = [&](int r) {
    std::mt19937 g(seed + uint32_t(r));
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
  };
  std::vector<float> send = input(rank), recv(n, kPoison);
  c.allReduce(send.data(), recv.data(), n, DataType::f32, RedOpKind::SUM);
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < size; ++r) want += double(input(r)[i]);
    MP_CHECK(std::fabs(double(recv[i]) - want) <= 1e-5 * size, "element %zu: %f vs %f", i,
             double(recv[i]), want);
  }
}

TEST(CommArgs, RejectsBadArgumentsAndWritesNothing) {
  auto res = cclx::test::runRanks(2, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    cclx::Options o;
    o.timeout = 30s;
    auto comm = cclx::test::makeCpuComm(rank, size, store, o);
    MP_CHECK(comm->rank() == rank && comm->size() == size);
    MP_CHECK(comm->name() == "default" && comm->backendName() == "cclx");
    MP_CHECK(comm->localSize() == size && comm->localRank() == rank);
    badCalls(*comm, rank, size);
    goodAllReduce(*comm, rank, size, 7);
    // Zero-element calls with null buffers are valid no-ops.
    comm->allReduce(nullptr, nullptr, 0, DataType::f32, RedOpKind::SUM);
    goodAllReduce(*comm, rank, size, 99);
    MP_CHECK(comm->asyncError() == cclxSuccess);
    comm->finalize();
    std::vector<float> buf(8, kPoison);
    EXPECT_CODE(cclxInvalidUsage,
                comm->allReduce(buf.data(), buf.data(), 8, DataType::f32, RedOpKind::SUM));
    EXPECT_CODE(cclxInvalidUsage, comm->barrier());
    EXPECT_CODE(cclxInvalidUsage, comm->split({0}, "late"));
    MP_CHECK(allPoison(buf));

    auto second = cclx::test::makeCpuComm(rank, size, store, o);
    second->abort();
    EXPECT_CODE(cclxInvalidUsage, second->broadcast(buf.data(), buf.data(), 8, DataType::f32, 0));
    MP_CHECK(second->asyncError() == cclxAborted);
    MP_CHECK(allPoison(buf));
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(CommArgs, CreateRejectsBadArguments) {
  auto server = cclx::TcpStore::create("127.0.0.1", 0, true, "args", 5s);
  auto cpu = cclx::DeviceSpec::cpu();
  cclx::Options o;
  o.timeout = 2s;
  std::string msg;
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, o, server, 2, 2); }), cclxInvalidArgument);
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, o, server, -1, 2); }), cclxInvalidArgument);
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, o, server, 0, 0); }), cclxInvalidArgument);
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, o, nullptr, 0, 1); }), cclxInvalidArgument);
  cclx::Options bad = o;
  bad.name = "";
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, bad, server, 0, 1); }), cclxInvalidArgument);
  bad = o;
  bad.timeout = -5ms;  // 0 means the default (CCLX_TIMEOUT / TORCHCOMM_TIMEOUT_SECONDS / 600 s)
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, bad, server, 0, 1); }), cclxInvalidArgument);
  bad = o;
  bad.backend = "nccl";
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, bad, server, 0, 1); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("the nccl backend needs a CUDA device"), std::string::npos) << msg;
  bad.backend = "cclx";
  bad.hints = {{"fp8_algo", "bogus"}};
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, bad, server, 0, 1); }, &msg), cclxInvalidArgument);
  EXPECT_EQ(msg, "hint fp8_algo='bogus' is not one of auto, oneshot, twoshot");
  bad.hints = {{"lowprecision", "fp8"}};
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, bad, server, 0, 1); }, &msg), cclxInvalidArgument);
  bad.hints.clear();
  bad.backend = "gloo";
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cpu, bad, server, 0, 1); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("gloo"), std::string::npos) << msg;
#if !defined(CCLX_HAVE_CUDA)
  EXPECT_EQ(codeOf([&] { cclx::Comm::create(cclx::DeviceSpec::cuda(0), o, server, 0, 1); }, &msg),
            cclxUnsupported);
  EXPECT_NE(msg.find("without CUDA"), std::string::npos) << msg;
#endif
}

// The one rule of cclx::launchEnv (every front end reads the environment through it): pairs, no
// mixing, rank 0 of 1 when nothing is set, clear errors naming the variables.
TEST(CommArgs, LaunchEnvReadsPairsAndRejectsMixes) {
  const char* vars[] = {"TORCHCOMM_RANK", "TORCHCOMM_SIZE", "RANK", "WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT"};
  for (const char* v : vars) unsetenv(v);
  cclx::LaunchEnv e = cclx::launchEnv();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.size, 1);
  EXPECT_EQ(e.masterAddr, "127.0.0.1");
  EXPECT_EQ(e.masterPort, 29500);
  std::string msg;
  // A rank from one launcher and a size from another: refused, naming the missing half.
  setenv("TORCHCOMM_RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  EXPECT_EQ(codeOf([] { cclx::launchEnv(); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("TORCHCOMM_SIZE"), std::string::npos) << msg;
  EXPECT_EQ(codeOf([] { cclx::Comm::fromEnv(cclx::DeviceSpec::cpu()); }), cclxInvalidArgument);
  unsetenv("TORCHCOMM_RANK");
  EXPECT_EQ(codeOf([] { cclx::launchEnv(); }, &msg), cclxInvalidArgument);  // WORLD_SIZE alone
  EXPECT_NE(msg.find("RANK"), std::string::npos) << msg;
  setenv("RANK", "1", 1);
  e = cclx::launchEnv();
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.size, 2);
  EXPECT_EQ(e.rankVar, "RANK");
  // TORCHCOMM_* take precedence as a pair.
  setenv("TORCHCOMM_RANK", "0", 1);
  setenv("TORCHCOMM_SIZE", "3", 1);
  e = cclx::launchEnv();
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.size, 3);
  EXPECT_EQ(e.sizeVar, "TORCHCOMM_SIZE");
  unsetenv("TORCHCOMM_RANK");
  unsetenv("TORCHCOMM_SIZE");
  setenv("WORLD_SIZE", "two", 1);
  EXPECT_EQ(codeOf([] { cclx::Comm::fromEnv(cclx::DeviceSpec::cpu()); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("WORLD_SIZE"), std::string::npos) << msg;
  setenv("WORLD_SIZE", "2", 1);
  setenv("RANK", "2", 1);
  EXPECT_EQ(codeOf([] { cclx::launchEnv(); }), cclxInvalidArgument);
  setenv("RANK", "0", 1);
  setenv("MASTER_PORT", "70000", 1);
  EXPECT_EQ(codeOf([] { cclx::launchEnv(); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("MASTER_PORT"), std::string::npos) << msg;
  for (const char* v : vars) unsetenv(v);
}

// Nothing set: Comm::fromEnv makes a comm of one rank on a private store (as Python's new_comm).
TEST(CommArgs, FromEnvWithoutALauncherIsOneRank) {
  for (const char* v : {"TORCHCOMM_RANK", "TORCHCOMM_SIZE", "RANK", "WORLD_SIZE"}) unsetenv(v);
  setenv("MASTER_PORT", "1", 1);  // not used by one rank
  cclx::Options o;
  o.timeout = 30s;
  auto comm = cclx::Comm::fromEnv(cclx::DeviceSpec::cpu(), o);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  comm->finalize();
  unsetenv("MASTER_PORT");
}

TEST(CommSplit, SubgroupsAndMismatch) {
  auto res = cclx::test::runRanks(4, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    cclx::Options o;
    o.timeout = 30s;
    auto comm = cclx::test::makeCpuComm(rank, size, store, o);
    auto pair = comm->split({3, 1}, "pair");
    MP_CHECK((pair != nullptr) == (rank == 1 || rank == 3), "membership of rank %d", rank);
    auto evens = comm->split({0, 2}, "evens");
    MP_CHECK((evens != nullptr) == (rank % 2 == 0));
    auto sub = pair ? pair : evens;
    MP_CHECK(sub->size() == 2);
    int want = rank == 3 ? 0 : rank == 1 ? 1 : rank / 2;
    MP_CHECK(sub->rank() == want, "rank %d got sub-rank %d", rank, sub->rank());
    MP_CHECK(sub->name() == (pair ? "pair" : "evens"));
    std::vector<double> in(257, double(rank) + 0.25), out(257, -1.0);
    sub->allReduce(in.data(), out.data(), in.size(), DataType::f64, RedOpKind::SUM);
    double expect = pair ? 1.25 + 3.25 : 0.25 + 2.25;
    MP_CHECK(out[256] == expect, "sub allreduce gave %f, want %f", out[256], expect);
    // The parent still works, and disagreeing splits fail on every rank.
    comm->allReduce(in.data(), out.data(), in.size(), DataType::f64, RedOpKind::MAX);
    MP_CHECK(out[0] == 3.25);
    std::vector<int> ranks = rank == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1};
    EXPECT_CODE(cclxInvalidUsage, comm->split(ranks, "odd-one-out"));
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(CommEnv, FromEnvironment) {
  int port;
  {
    auto probe = cclx::TcpStore::create("127.0.0.1", 0, true, "probe", 5s);
    port = probe->port();
  }
  auto res = cclx::test::runRanks(3, [port](int rank, int size, std::shared_ptr<cclx::Store>) {
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("TORCHCOMM_RANK", std::to_string(rank).c_str(), 1);
    setenv("TORCHCOMM_SIZE", std::to_string(size).c_str(), 1);
    setenv("RANK", "99", 1);  // TORCHCOMM_* take precedence
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("CCLX_JOB_ID", "env-test", 1);
    cclx::reloadConfig();
    cclx::Options o;
    o.timeout = 30s;
    o.name = "world";
    auto comm = cclx::Comm::fromEnv(cclx::DeviceSpec::cpu(), o);
    MP_CHECK(comm->rank() == rank && comm->size() == size && comm->localSize() == size);
    std::vector<int64_t> in(100, int64_t(1) << (10 * rank)), out(100, -1);
    comm->allReduce(in.data(), out.data(), in.size(), DataType::i64, RedOpKind::BOR);
    MP_CHECK(out[99] == (1 | (1 << 10) | (int64_t(1) << 20)), "got %lld", (long long)out[99]);
    comm->finalize();
  }, 120s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(CommArgs, HarnessReportsFailures) {
  auto res = cclx::test::runRanks(2, [](int rank, int, std::shared_ptr<cclx::Store>) {
    if (rank == 1) MP_CHECK(1 + 1 == 3, "arithmetic on rank %d", rank);
  }, 30s);
  EXPECT_FALSE(res.ok());
  ASSERT_EQ(res.exitCodes.size(), 2u);
  EXPECT_EQ(res.exitCodes[0], 0);
  EXPECT_EQ(res.exitCodes[1], 1);
  EXPECT_NE(res.log.find("arithmetic on rank 1"), std::string::npos) << res.log;
  auto thrown = cclx::test::runRanks(1, [](int, int, std::shared_ptr<cclx::Store>) {
    throw cclx::Error(cclxInternalError, "boom");
  }, 30s);
  EXPECT_EQ(thrown.exitCodes.at(0), 2);
  EXPECT_NE(thrown.log.find("boom"), std::string::npos) << thrown.log;
  auto hung = cclx::test::runRanks(1, [](int, int, std::shared_ptr<cclx::Store>) {
    for (;;) pause();
  }, std::chrono::seconds(1));
  EXPECT_EQ(hung.exitCodes.at(0), -1);
}

}  // namespace
