// Ranks sharing a GPU under MPS (mps.h).
#include "core/sharing/mps.h"

#include <cerrno>
#include <cstdlib>

#include "base/error.h"

namespace cclx {

int mpsThreadPercentLimit(int ranksOnGpu) { return ranksOnGpu <= 1 ? 100 : 100 / ranksOnGpu; }

std::string mpsShareProblem(const std::string& bus, int ranksOnGpu, bool mps,
                            const char* percentEnv) {
  if (!mps || ranksOnGpu < 2) return "";
  const int limit = mpsThreadPercentLimit(ranksOnGpu);
  double pct = 100.0;
  std::string shown = "unset (the daemon's default, 100 unless set lower)";
  if (percentEnv && *percentEnv) {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(percentEnv, &end);
    if (errno != 0 || end == percentEnv || *end != '\0' || !(v > 0.0))
      return "";  // MPS itself refuses a malformed value when the context is created
    pct = v;
    shown = percentEnv;
  }
  if (pct <= double(limit)) return "";
  return strFormat(
      "%d ranks share GPU %s under MPS and this rank's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is %s: "
      "one rank's kernel can then hold the SMs a peer's kernel needs while it waits for that "
      "peer, which deadlocks until the call's deadline; set CUDA_MPS_ACTIVE_THREAD_PERCENTAGE "
      "to at most %d (100 / %d) for every rank on the GPU",
      ranksOnGpu, bus.c_str(), shown.c_str(), limit, ranksOnGpu);
}

}  // namespace cclx
