// launchEnv() (include/cclx/cclx.hpp): the one reading of a launcher's environment (rank, world
// size, where the store is) that every front end uses: Comm::fromEnv and the C API, the Python
// package (through its extension) and the torchcomms backend.
#include <cerrno>
#include <cstdlib>
#include <string>

#include <cclx/cclx.hpp>

#include "base/error.h"
#include "core/comm/comm_internal.h"

namespace cclx {

const char* envOrNull(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int envInt(const char* name, const char* v, long lo, long hi) {
  errno = 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || n < lo || n > hi)
    CCLX_THROW(cclxInvalidArgument, "environment variable %s='%s' is not an integer in [%ld, %ld]",
               name, v, lo, hi);
  return int(n);
}

LaunchEnv launchEnv() {
  LaunchEnv e;
  // The pair that is (even partly) set gives both values; a half pair is an error, also when the
  // other pair's half would complete it (a rank from one launcher and a size from another).
  struct Pair {
    const char *rank, *size;
  };
  const Pair pairs[] = {{"TORCHCOMM_RANK", "TORCHCOMM_SIZE"}, {"RANK", "WORLD_SIZE"}};
  for (const Pair& p : pairs) {
    const char* r = envOrNull(p.rank);
    const char* s = envOrNull(p.size);
    if (!r && !s) continue;
    if (!r || !s)
      CCLX_THROW(cclxInvalidArgument,
                 "%s is set but %s is not: set both (TORCHCOMM_RANK with TORCHCOMM_SIZE, or "
                 "torchrun's RANK with WORLD_SIZE; the two pairs do not mix)",
                 r ? p.rank : p.size, r ? p.size : p.rank);
    e.size = envInt(p.size, s, 1, 1 << 20);
    e.rank = envInt(p.rank, r, 0, 1 << 20);
    if (e.rank >= e.size)
      CCLX_THROW(cclxInvalidArgument, "invalid rank %d for world size %d (%s=%s, %s=%s)", e.rank,
                 e.size, p.rank, r, p.size, s);
    e.rankVar = p.rank;
    e.sizeVar = p.size;
    break;
  }
  if (const char* a = envOrNull("MASTER_ADDR")) e.masterAddr = a;
  if (const char* p = envOrNull("MASTER_PORT")) e.masterPort = envInt("MASTER_PORT", p, 1, 65535);
  e.torchrun = envOrNull("TORCHELASTIC_RUN_ID") != nullptr;
  return e;
}

}  // namespace cclx
