// How long the multi-process and GPU tests wait, and how many rounds their stress cases run, from
// one setting, CCLX_TEST_TIME_SCALE (a positive number, default 1):
//
//  * below 1, a quick run (scripts/gpu_verify.sh sets 0.4): a timeout that a case waits out on
//    purpose (a late, missing or killed rank; expiring()) and the sleeps made from it shrink by the
//    factor, never below 1 s; stress loops run the factor times their rounds (rounds()). What the
//    cases assert stays the same: the late rank is still late by the same multiple of the
//    timeout, the errors must still name the same ranks.
//  * above 1, a slow run (sanitizers: scripts/sanitize.sh, scripts/gpu_sanitize.sh): those
//    timeouts and sleeps grow by the factor, so that slow kernels are not taken for hung ones.
//
// A bound meant never to be reached (a guard against a hang, the slack allowed for ranks that
// time-slice one GPU, runRanks' deadline) only ever grows: guard(). The defaults (factor 1) are
// what a person running a binary by hand gets.
#pragma once

#include <cclx/cclx.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace cclx::test {

/// CCLX_TEST_TIME_SCALE: a positive number; 1 when unset or not a positive number.
inline double timeScale() {
  const char* v = std::getenv("CCLX_TEST_TIME_SCALE");
  if (!v || !*v) return 1.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  return end != v && s > 0 ? s : 1.0;
}

/// A timeout (or a sleep derived from it) that the case waits out on purpose: d times the
/// factor, at least 1 s (never shorter than d itself when d is under 1 s).
inline std::chrono::milliseconds expiring(std::chrono::milliseconds d) {
  const auto scaled = std::chrono::milliseconds(int64_t(double(d.count()) * timeScale()));
  return std::max(scaled, std::min(d, std::chrono::milliseconds(1000)));
}

/// A bound that must never be reached: d, stretched by the factor when it is above 1.
inline std::chrono::milliseconds guard(std::chrono::milliseconds d) {
  return std::chrono::milliseconds(int64_t(double(d.count()) * std::max(1.0, timeScale())));
}

/// The same in seconds, for bounds checked against a measured time.
inline double expiringSeconds(double s) {
  return double(expiring(std::chrono::milliseconds(int64_t(s * 1000))).count()) / 1000.0;
}
inline double guardSeconds(double s) { return s * std::max(1.0, timeScale()); }

/// Rounds of a stress loop: the count in `env` when that variable is set (an explicit count
/// wins), else `dflt` times the factor when it is below 1; at least 1.
inline uint64_t rounds(uint64_t dflt, const char* env = nullptr) {
  if (const char* v = env ? std::getenv(env) : nullptr; v && *v) {
    const long long n = std::atoll(v);
    return n < 1 ? 1 : uint64_t(n);
  }
  const double n = double(dflt) * std::min(1.0, timeScale());
  return n < 1 ? 1 : uint64_t(n);
}

/// A rank that stays away from the calls on purpose (a "missing" rank) keeps its process alive
/// until every other rank called othersDone(tag), so that they see the timeout they wait for and
/// not a peer that exited, then returns; at most `bound` (then it returns too: the others'
/// verdicts decide the case).
inline void waitForOthers(Store& store, const std::string& tag, int rank, int size,
                          std::chrono::milliseconds bound) {
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r)
    if (r != rank) keys.push_back("test_hold/" + tag + "/" + std::to_string(r));
  try {
    store.wait(keys, bound);
  } catch (const Error&) {
  }
}

/// Called by every other rank once its checks are done (after its finalize).
inline void othersDone(Store& store, const std::string& tag, int rank) {
  store.set("test_hold/" + tag + "/" + std::to_string(rank), "1");
}

}  // namespace cclx::test
