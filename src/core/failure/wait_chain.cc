#include "core/failure/wait_chain.h"

namespace cclx {

namespace {

std::string ranks(uint32_t mask) {
  std::string s;
  for (int r = 0; r < 32; ++r)
    if (mask >> r & 1u) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

}  // namespace

uint32_t waitChainEnd(uint32_t missing, const uint32_t* waitingFor, int size, int self) {
  if (size > 32) size = 32;
  const uint32_t all = size == 32 ? ~0u : (1u << size) - 1u;
  const uint32_t me = self >= 0 && self < size ? 1u << self : 0u;
  uint32_t visited = 0, end = 0, frontier = missing & all & ~me;
  while (frontier) {
    visited |= frontier;
    uint32_t next = 0;
    for (int r = 0; r < size; ++r) {
      if (!(frontier >> r & 1u)) continue;
      if (waitingFor[r] & all) next |= waitingFor[r] & all;
      else end |= 1u << r;
    }
    frontier = next & ~visited & ~me;
  }
  return end == (missing & all & ~me) ? 0u : end;
}

std::string waitChainNote(uint32_t missing, const uint32_t* waitingFor, int size, int self) {
  const uint32_t end = waitChainEnd(missing, waitingFor, size, self);
  if (!end) return "";
  uint32_t waiting = 0;
  for (int r = 0; r < size && r < 32; ++r)
    if ((missing >> r & 1u) && waitingFor[r]) waiting |= 1u << r;
  return " (rank(s) " + ranks(waiting) + " were themselves waiting; the waits end at rank(s) " +
         ranks(end) + ")";
}

}  // namespace cclx
