// The failure model on the GPU (docs/design/failure.md), several ranks per GPU: a late
// rank (it sleeps twice the timeout before call k of K asynchronous calls), a dead rank (SIGKILL
// in the middle of a loop) and CUDA-graph replays after a timeout, for every peer algorithm
// (DDA flat, Lamport, tree, FP8 two-shot and one-shot, auto). Every output must be exact (equal to
// the host twin of the same algorithm) or NaN in every element, never another value (outputs
// start as a plausible stale value); every rank with an output that is not exact must have got an
// error; nothing may wait longer than the timeout (plus slack for the shared GPU) per comm, not
// per queued call. With abort-on-error on, the watchdog ends the process without any further
// call on the comm.
//
// World size: CCLX_TEST_RANKS (default 3). The comm timeout (3 s) and the sleeps made from it
// follow CCLX_TEST_TIME_SCALE (helpers/scale.h: scripts/gpu_verify.sh runs them at 1.2 s).
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/backend.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

using namespace cclx;
using namespace gputest;

namespace {

using Clock = std::chrono::steady_clock;
using Hints = std::map<std::string, std::string>;
// The comms' timeout, waited out by every case: 3 s, scaled (helpers/scale.h).
std::chrono::milliseconds commTimeout() { return test::expiring(std::chrono::seconds(3)); }
constexpr size_t kCount = 24577;  // elements per call (odd)
constexpr int kStale = 0x40;      // fill byte of outputs before a call: 3.0f, bf16 3.0: plausible

struct AlgoCase {
  const char* name;
  Hints hints;
  DataType t;
};
const AlgoCase kAlgos[] = {
    {"flat", {{"algo", "flat"}}, DataType::f32},
    {"lamport", {{"algo", "lamport"}}, DataType::bf16},
    {"tree", {{"algo", "tree"}}, DataType::f32},
    {"fp8-twoshot", {{"low_precision", "fp8"}, {"fp8_algo", "twoshot"}}, DataType::bf16},
    {"fp8-oneshot", {{"low_precision", "fp8"}, {"fp8_algo", "oneshot"}}, DataType::f32},
    {"auto", {}, DataType::f16},
};

// The comms of this suite: the short timeout, abort-on-error off unless asked.
std::shared_ptr<Comm> gpuComm(int rank, int size, std::shared_ptr<Store> store,
                              const std::string& name, bool abortOnError = false) {
  return sharedGpuComm(rank, size, std::move(store), name, commTimeout(), abortOnError);
}

// A comm whose creation may take as long as a loaded machine needs (the setup is not what the
// cases wait out); its calls take the short timeout through their options (callTimeout).
std::shared_ptr<Comm> gpuCommSlowSetup(int rank, int size, std::shared_ptr<Store> store,
                                       const std::string& name) {
  return sharedGpuComm(rank, size, std::move(store), name, test::guard(std::chrono::seconds(60)),
                       false);
}
void callTimeout(CollOptions& co) { co.timeout = commTimeout(); }

std::shared_ptr<Comm> twinComm(int rank, int size, std::shared_ptr<Store> store,
                               const std::string& name) {
  return hostTwin(rank, size, std::move(store), name, /*abortOnError=*/false);
}

// One call of a scenario: its input, device buffers, Work and verdicts.
struct Call {
  std::vector<char> in;
  char* send = nullptr;
  char* recv = nullptr;  // kStale bytes before the call, a guard byte after
  std::shared_ptr<Work> work;
  bool enqueued = false, error = false;
  ~Call() {
    (void)cudaFree(send);
    (void)cudaFree(recv);
  }
};

std::vector<std::unique_ptr<Call>> makeCalls(const AlgoCase& a, int rank, int k, uint64_t seed) {
  std::vector<std::unique_ptr<Call>> calls;
  const size_t bytes = kCount * dtypeSize(a.t);
  for (int i = 0; i < k; ++i) {
    auto c = std::make_unique<Call>();
    c->in = genBuf(a.t, RedOpKind::SUM, seed + uint64_t(i), rank, kCount);
    c->send = h2d(c->in);
    CK(cudaMalloc(&c->recv, bytes + 1));
    CK(cudaMemset(c->recv, kStale, bytes));
    CK(cudaMemset(c->recv + bytes, 0xA5, 1));
    calls.push_back(std::move(c));
  }
  CK(cudaDeviceSynchronize());
  return calls;
}

bool allOnes(const std::vector<char>& v) {
  for (char b : v)
    if (uint8_t(b) != 0xFF) return false;
  return true;
}

// Checks every call of a scenario: exact (the twin's bits) or all-ones bytes (NaN in every float
// type); never written past its end; a rank with any output that is not exact saw an error.
// Returns the number of exact outputs.
int checkCalls(const AlgoCase& a, Comm& twin, std::vector<std::unique_ptr<Call>>& calls, int rank,
               const char* what) {
  const size_t bytes = kCount * dtypeSize(a.t);
  int exact = 0, nan = 0;
  bool anyError = false;
  for (size_t i = 0; i < calls.size(); ++i) {
    Call& c = *calls[i];
    if (c.work) {
      try {
        (void)c.work->isCompleted();
      } catch (const Error&) {
        c.error = true;
      }
    }
    anyError = anyError || c.error;
    std::vector<char> want(bytes);
    CollOptions co;
    co.hints = a.hints;
    twin.allReduce(c.in.data(), want.data(), kCount, a.t, RedOpKind::SUM, co);
    if (!c.enqueued) continue;  // the call itself threw: the caller got the error, no output
    std::vector<char> got = d2h(c.recv, bytes + 1);
    MP_CHECK(uint8_t(got.back()) == 0xA5, "%s %s call %zu: wrote past the output", a.name, what, i);
    got.pop_back();
    if (got == want) {
      ++exact;
    } else {
      MP_CHECK(allOnes(got), "%s %s: rank %d call %zu: the output is neither exact nor NaN",
               a.name, what, rank, i);
      ++nan;
    }
  }
  MP_CHECK(nan == 0 || anyError, "%s %s: rank %d has %d NaN outputs but got no error", a.name,
           what, rank, nan);
  std::printf("[failure] %s %s rank %d: %d exact, %d NaN, error %s\n", a.name, what, rank, exact,
              nan, anyError ? "yes" : "no");
  return exact;
}

// Enqueues call i asynchronously on `s`; an error at enqueue (the comm already failed) is kept.
void enqueueCall(Comm& gpu, const AlgoCase& a, Call& c, cudaStream_t s) {
  CollOptions co;
  co.async = true;
  co.stream = s;
  co.hints = a.hints;
  callTimeout(co);
  try {
    c.work = gpu.allReduce(c.send, c.recv, kCount, a.t, RedOpKind::SUM, co);
    c.enqueued = true;
  } catch (const Error& e) {
    c.error = true;
  }
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Slack for the shared GPU: ranks time-slice one device (a guard: never shortened).
double slack(int n) { return test::guardSeconds(2.0 + 0.5 * n); }

}  // namespace

// The last rank sleeps 2x the timeout before call kLate of kCalls asynchronous calls.
TEST(GpuFailure, LateRankGivesExactOrNaN) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  constexpr int kCalls = 8, kLate = 3;
  const double T = std::chrono::duration<double>(commTimeout()).count();
  for (const AlgoCase& a : kAlgos) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      const int late = size - 1;
      auto gpu = gpuCommSlowSetup(rank, size, store, std::string("late_") + a.name);
      auto twin = twinComm(rank, size, store, std::string("late_twin_") + a.name);
      Stream st;
      auto calls = makeCalls(a, rank, kCalls, 1000);
      auto t0 = Clock::now();
      for (int i = 0; i < kCalls; ++i) {
        if (rank == late && i == kLate) {
          std::this_thread::sleep_for(2 * commTimeout());
          t0 = Clock::now();
        }
        enqueueCall(*gpu, a, *calls[size_t(i)], st.s);
      }
      CK(cudaDeviceSynchronize());  // async calls run on the comm's internal stream
      const double waited = since(t0);
      // Others: calls before kLate, one timeout, the rest stop at entry. The late rank: every call
      // after its sleep stops at entry.
      const double bound = rank == late ? slack(size) : T + slack(size);
      MP_CHECK(waited <= bound, "%s: rank %d waited %.1f s (bound %.1f s)", a.name, rank, waited,
               bound);
      const int exact = checkCalls(a, *twin, calls, rank, "late rank");
      MP_CHECK(exact >= kLate, "%s: rank %d: only %d exact outputs before the late call", a.name,
               rank, exact);
      MP_CHECK(exact < kCalls, "%s: rank %d: every call exact although rank %d was late", a.name,
               rank, late);
      twin->finalize();
      gpu->abort();
    }, std::chrono::seconds(240));
    test::echoTagged(res.log, "[failure]");
    ASSERT_TRUE(res.ok()) << a.name << "\n" << res.log;
  }
}

// The last rank dies (SIGKILL) before call 5 of 12 asynchronous calls. The references come
// first, from the host twin of all ranks.
TEST(GpuFailure, DeadRankGivesExactOrNaN) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  constexpr int kCalls = 12, kDie = 5;
  const double T = std::chrono::duration<double>(commTimeout()).count();
  for (const AlgoCase& a : kAlgos) {
    auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
      const int victim = size - 1;
      auto gpu = gpuCommSlowSetup(rank, size, store, std::string("dead_") + a.name);
      auto twin = twinComm(rank, size, store, std::string("dead_twin_") + a.name);
      Stream st;
      auto calls = makeCalls(a, rank, kCalls, 2000);
      const size_t bytes = kCount * dtypeSize(a.t);
      std::vector<std::vector<char>> want(kCalls, std::vector<char>(bytes));
      for (int i = 0; i < kCalls; ++i) {
        CollOptions co;
        co.hints = a.hints;
        twin->allReduce(calls[size_t(i)]->in.data(), want[size_t(i)].data(), kCount, a.t,
                        RedOpKind::SUM, co);
      }
      twin->finalize();
      const auto t0 = Clock::now();
      for (int i = 0; i < kCalls; ++i) {
        if (rank == victim && i == kDie) {
          CK(cudaDeviceSynchronize());  // its calls so far are complete
          raise(SIGKILL);
        }
        enqueueCall(*gpu, a, *calls[size_t(i)], st.s);
      }
      CK(cudaDeviceSynchronize());  // async calls run on the comm's internal stream
      const double waited = since(t0);
      MP_CHECK(waited <= T + slack(size), "%s: rank %d waited %.1f s", a.name, rank, waited);
      int exact = 0, nan = 0;
      bool anyError = false;
      std::string firstError;
      for (int i = 0; i < kCalls; ++i) {
        Call& c = *calls[size_t(i)];
        if (c.work) {
          try {
            (void)c.work->isCompleted();
          } catch (const Error& e) {
            c.error = true;
            if (firstError.empty()) firstError = e.what();
          }
        }
        anyError = anyError || c.error;
        if (!c.enqueued) continue;
        const std::vector<char> got = d2h(c.recv, bytes);
        if (got == want[size_t(i)]) {
          MP_CHECK(i < kDie, "%s: rank %d call %d exact although rank %d died before it",
                   a.name, rank, i, victim);
          ++exact;
          continue;
        }
        MP_CHECK(allOnes(got), "%s: rank %d call %d: the output is neither exact nor NaN", a.name,
                 rank, i);
        ++nan;
      }
      MP_CHECK(nan > 0 && anyError, "%s: rank %d: %d NaN outputs, error %d", a.name, rank, nan,
               int(anyError));
      MP_CHECK(firstError.find(std::to_string(victim)) != std::string::npos,
               "%s: the error does not name rank %d: %s", a.name, victim, firstError.c_str());
      std::printf("[failure] %s dead rank, rank %d: %d exact, %d NaN, %.1f s: %s\n", a.name, rank,
                  exact, nan, waited, firstError.c_str());
      gpu->abort();
    }, std::chrono::seconds(240));
    test::echoTagged(res.log, "[failure]");
    for (int r = 0; r < n - 1; ++r)
      EXPECT_EQ(res.exitCodes[size_t(r)], 0) << a.name << " rank " << r << "\n" << res.log;
  }
}

// A graph of a flat and a Lamport allreduce, replayed: once by everyone, then the last rank
// replays 2x the timeout late, then everyone replays twice more. The late replay and the later
// ones give NaN quickly on every rank (the abort word stops them at entry) and every rank's comm
// reports the failure.
TEST(GpuFailure, GraphReplayAfterTimeout) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  const double T = std::chrono::duration<double>(commTimeout()).count();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    const int late = size - 1;
    auto gpu = gpuCommSlowSetup(rank, size, store, "graph_late");
    auto twin = twinComm(rank, size, store, "graph_late_twin");
    Stream st;
    const AlgoCase algs[2] = {kAlgos[0], kAlgos[1]};
    std::vector<std::unique_ptr<Call>> calls;
    for (const AlgoCase& a : algs) {
      auto c = makeCalls(a, rank, 1, 3000);
      calls.push_back(std::move(c[0]));
    }
    auto graph = std::make_unique<Graph>(st.s, [&] {
      for (int i = 0; i < 2; ++i) {
        CollOptions co;
        co.stream = st.s;
        co.hints = algs[i].hints;
        callTimeout(co);
        gpu->allReduce(calls[size_t(i)]->send, calls[size_t(i)]->recv, kCount, algs[i].t,
                       RedOpKind::SUM, co);
      }
    });
    auto replay = [&] {
      for (int i = 0; i < 2; ++i)
        CK(cudaMemsetAsync(calls[size_t(i)]->recv, kStale, kCount * dtypeSize(algs[i].t), st.s));
      graph->launch();
      CK(cudaStreamSynchronize(st.s));
    };
    auto outputs = [&](int i) { return d2h(calls[size_t(i)]->recv, kCount * dtypeSize(algs[i].t)); };
    replay();
    for (int i = 0; i < 2; ++i) {
      std::vector<char> want(kCount * dtypeSize(algs[i].t));
      CollOptions co;
      co.hints = algs[i].hints;
      twin->allReduce(calls[size_t(i)]->in.data(), want.data(), kCount, algs[i].t,
                      RedOpKind::SUM, co);
      MP_CHECK(outputs(i) == want, "replay 1, %s: not exact", algs[i].name);
    }
    if (rank == late) std::this_thread::sleep_for(2 * commTimeout());
    const auto t0 = Clock::now();
    replay();
    MP_CHECK(since(t0) <= T + slack(size), "late replay: rank %d waited %.1f s", rank, since(t0));
    for (int i = 0; i < 2; ++i)
      MP_CHECK(allOnes(outputs(i)), "late replay, %s: rank %d: not NaN", algs[i].name, rank);
    for (int rep = 0; rep < 2; ++rep) {
      const auto t1 = Clock::now();
      replay();
      MP_CHECK(since(t1) <= test::guardSeconds(1.0), "replay after the failure took %.1f s",
               since(t1));
      for (int i = 0; i < 2; ++i)
        MP_CHECK(allOnes(outputs(i)), "replay after the failure, %s: not NaN", algs[i].name);
    }
    // The watchdog (or this query) turns the device's report into the comm's failure.
    const auto t2 = Clock::now();
    cclxResult_t e = cclxSuccess;
    while ((e = gpu->asyncError()) == cclxSuccess && since(t2) < test::guardSeconds(2.0))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    MP_CHECK(e != cclxSuccess, "rank %d: no failure reported after the replays", rank);
    graph.reset();  // before the comm goes
    twin->finalize();
    gpu->abort();
  }, std::chrono::seconds(240));
  ASSERT_TRUE(res.ok()) << res.log;
}

// Abort-on-error on: the last rank never calls; the others enqueue one allreduce and make no
// further call. The watchdog must end their processes (SIGABRT) within the timeout plus slack,
// after one line naming the missing rank.
TEST(GpuFailure, WatchdogAbortsTheProcess) {
  GPU_REQUIRE(1);
  const int n = sharedWorldSize(3);
  const double T = std::chrono::duration<double>(commTimeout()).count();
  auto res = test::runRanks(n, [&](int rank, int size, std::shared_ptr<Store> store) {
    auto gpu = gpuComm(rank, size, store, "watchdog_abort", /*abortOnError=*/true);
    if (rank == size - 1) {
      std::this_thread::sleep_for(commTimeout() +
                                  std::chrono::milliseconds(int64_t((slack(size) + 2) * 1000)));
      std::_Exit(0);  // never calls
    }
    char* p = poisoned(4096);
    CollOptions co;
    co.hints = {{"algo", "flat"}};
    (void)gpu->allReduce(p, p, 1000, DataType::f32, RedOpKind::SUM, co);
    const auto t0 = Clock::now();
    while (since(t0) < T + slack(size) + 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::printf("[failure] rank %d: still alive %.1f s after the call\n", rank, since(t0));
    std::_Exit(0);
  }, std::chrono::seconds(120));
  test::echoTagged(res.log, "[failure]");
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_EQ(res.exitCodes[size_t(r)], 128 + SIGABRT) << "rank " << r << "\n" << res.log;
  }
  EXPECT_NE(res.log.find("waiting for rank(s) " + std::to_string(n - 1)), std::string::npos)
      << res.log;
}

#else

TEST(GpuFailure, LateRankGivesExactOrNaN) { GTEST_SKIP() << "built without CUDA"; }

#endif
