// CCLX_TEST_GROW_FAIL (see grow_fault.h).
#include "core/failure/grow_fault.h"

#include <cerrno>
#include <cstdlib>

#include "base/error.h"

namespace cclx {

namespace {

// A decimal integer in [lo, hi] spanning the whole of `s`, or -1.
long parseWhole(const std::string& s, long lo, long hi) {
  if (s.empty() || s.size() > 9) return -1;
  for (char c : s)
    if (c < '0' || c > '9') return -1;
  const long v = std::strtol(s.c_str(), nullptr, 10);
  return v < lo || v > hi ? -1 : v;
}

}  // namespace

bool GrowFault::hits(int r, int growth) const {
  if (rank == kNone || growth != nth) return false;
  return rank == kAllRanks || rank == r;
}

GrowFault parseGrowFault(const char* value) {
  GrowFault f;
  if (!value || !*value) return f;
  const std::string s(value);
  const size_t colon = s.find(':');
  const std::string who = colon == std::string::npos ? "" : s.substr(0, colon);
  const long n = colon == std::string::npos ? -1 : parseWhole(s.substr(colon + 1), 1, 1 << 20);
  const long r = who == "all" ? 0 : parseWhole(who, 0, 1 << 20);
  if (n < 0 || r < 0)
    CCLX_THROW(cclxInvalidArgument,
               "CCLX_TEST_GROW_FAIL='%s' is not <rank|all>:<n> (a rank >= 0 or 'all', and the "
               "growth n >= 1 that fails)",
               value);
  f.rank = who == "all" ? GrowFault::kAllRanks : int(r);
  f.nth = int(n);
  return f;
}

GrowFault growFaultFromEnv() { return parseGrowFault(std::getenv("CCLX_TEST_GROW_FAIL")); }

std::string growFaultMessage(const GrowFault& f, int rank, int growth) {
  const std::string who = f.rank == GrowFault::kAllRanks ? "all" : std::to_string(f.rank);
  return strFormat("staging growth %d failure injected on rank %d (CCLX_TEST_GROW_FAIL=%s:%d)",
                   growth, rank, who.c_str(), f.nth);
}

}  // namespace cclx
