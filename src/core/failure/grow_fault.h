// Test-only fault injection for the collective growth of peer staging (gpu/peer_mem.h
// peerMemGrow): CCLX_TEST_GROW_FAIL=<rank|all>:<n> makes the n-th growth of every comm fail on
// that rank (or on every rank) as if its allocation had failed. The growth then reports the
// failure through its records like a real one: every rank marks the regions failed and the call
// chooses again (an algorithm whose staging is there, or NCCL), or fails with a clear error on
// every rank when nothing else can run it; the comm stays usable either way.
//
// Contract:
//  * growths are counted per comm, from 1, on every rank alike: each peerMemGrow that allocates
//    something counts once (the exchange staging that ranks sharing a GPU allocate at creation
//    included), so the n-th growth is the same call on every rank;
//  * the value is read when a growth happens (no process-wide caching: a test may set it before
//    creating each comm); unset or empty: no injection;
//  * a malformed value throws cclxInvalidArgument naming the variable.
#pragma once

#include <string>

namespace cclx {

struct GrowFault {
  static constexpr int kNone = -1;
  static constexpr int kAllRanks = -2;
  int rank = kNone;  // kNone, kAllRanks or a rank
  int nth = 0;       // the growth that fails, 1-based

  /// True when growth `growth` (1-based) of a comm fails on `rank`.
  bool hits(int rank, int growth) const;
};

/// Parses "<rank|all>:<n>" (n >= 1; rank >= 0). Null or empty: no injection. Throws
/// cclxInvalidArgument on anything else.
GrowFault parseGrowFault(const char* value);

/// The fault CCLX_TEST_GROW_FAIL asks for now.
GrowFault growFaultFromEnv();

/// The message of an injected growth failure ("... (CCLX_TEST_GROW_FAIL=1:2)").
std::string growFaultMessage(const GrowFault& f, int rank, int growth);

}  // namespace cclx
