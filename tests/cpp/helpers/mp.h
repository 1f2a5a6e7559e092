// Multi-process test harness: runs a function on n forked ranks that share a TCP store.
//
//   auto res = cclx::test::runRanks(4, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
//     auto comm = cclx::test::makeCpuComm(rank, size, store);
//     ...
//     MP_CHECK(got == want, "element %zu: got %f want %f", i, got, want);
//   });
//   ASSERT_TRUE(res.ok()) << res.log;
//
// Inside fn use MP_CHECK, not gtest assertions: a rank is a separate process whose exit code is
// its verdict (0: fn returned; 1: an MP_CHECK failed; 2: fn threw; 3: the harness itself failed
// in the child; -1: killed after the timeout). The parent never touches CUDA, so fn may.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "helpers/scale.h"  // CCLX_TEST_TIME_SCALE: runRanks' deadline is a guard()

namespace cclx::test {

struct MpResult {
  std::vector<int> exitCodes;  // per rank
  std::string log;             // everything the ranks printed, each line prefixed "[rank r] "
  bool ok() const;
};

/// `afterFork` (optional) runs in the parent once every rank is forked and the store server
/// started, before the wait (a test may start threads there). The harness forks before it starts
/// the server's thread: the caller should have no threads running either when it calls runRanks.
MpResult runRanks(int n, const std::function<void(int rank, int size, std::shared_ptr<Store>)>& fn,
                  std::chrono::seconds timeout = std::chrono::seconds(300),
                  const std::function<void()>& afterFork = {});

std::shared_ptr<Comm> makeCpuComm(int rank, int size, std::shared_ptr<Store> store,
                                  Options opts = {});

/// Rank of this process inside runRanks (-1 in the parent).
int mpRank();

/// Prints (in the parent) every line of a runRanks log that carries `tag`, starting at the tag.
void echoTagged(const std::string& log, const char* tag);

[[noreturn]] void mpFail(const char* file, int line, const char* cond, const char* fmt = nullptr,
                         ...) __attribute__((format(printf, 4, 5)));

}  // namespace cclx::test

#define MP_CHECK(cond, ...)                                                              \
  do {                                                                                   \
    if (!(cond)) ::cclx::test::mpFail(__FILE__, __LINE__, #cond __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
