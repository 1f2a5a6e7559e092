// The exchange collectives of the DDA kernels (all-gather, reduce-scatter, all-to-all,
// all-to-all-v, the list forms of the first two, reduce-scatter-v, broadcast, reduce, and the
// collectives lowered onto grouped messages: scatter, gather, all-gather-v, all-to-all lists)
// described once as per-peer messages: what this rank sends to each rank and where each rank's
// message lands. The LL (xchg_ll.cu) and pipelined (xchg_pipe.cu) kernels take this plan;
// neither knows which collective it runs. Plain C++.
#pragma once

#include <cstddef>
#include <vector>

#include "gpu/algo.h"

namespace cclx {

struct XchgPlan {
  const char* src[kMaxRanks] = {};  // message to rank d (d == rank: the own part)
  size_t srcBytes[kMaxRanks] = {};
  char* dst[kMaxRanks] = {};        // copy: where rank s's message lands; reduce: dst[s] = output
  size_t dstBytes[kMaxRanks] = {};  // bytes expected from rank s (reduce: the output's size)
  bool reduce = false;              // reduce-scatter: combine every rank's message into dst[0]
  bool aligned = false;             // every pointer of a non-empty message is 16-byte aligned
  bool symmetric = false;           // every message has the same length on every rank
  size_t maxBytes = 0;              // the largest message of this rank (sent or received)
  // Which directions take part (bit r: to / from rank r). Collectives: all of them, an empty
  // message still passing its header chunks. A round of point-to-point messages (a batch,
  // xchgP2PRounds): only the directions with a message; the others move nothing, not even a
  // header, and their counters stay where they are.
  uint32_t sendMask = ~0u;
  uint32_t recvMask = ~0u;
};

/// The plan of a validated call of AllGather, ReduceScatter, AllToAll, AllToAllV, ReduceScatterV,
/// Broadcast, Reduce, a lowered collective (SendRecv with `what`) or one round of a batch of
/// point-to-point messages (SendRecv without `what`, at most one message per direction: see
/// xchgP2PRounds) on `rank` of `size` ranks. False when the exchange kernels cannot run it:
/// another collective, two messages between the same pair (a lowered collective, or a batch not
/// cut into rounds), or list buffers that overlap other than in place (a list's own buffer being
/// the input / output; validation already refuses that for the grouped forms).
/// Single-buffer forms with overlapping buffers are planned as given: the backend first stages
/// the input (xchgNeedsStagedInput, dda.h).
bool xchgPlan(const CollArgs& a, int rank, int size, XchgPlan& p);

/// A batch of point-to-point messages (SendRecv without `what`, validated) cut into rounds:
/// round j holds this rank's j-th send to each peer and its j-th receive from each peer (the
/// j-th send to itself with the j-th receive from itself). Messages between two ranks match in
/// order (cclx.hpp), so the k-th message from s to d is in round k on both ranks, whatever else
/// either rank's batch holds: each round is one launch whose directions pair up with the peers'
/// launches of the same round. An empty batch has no round.
std::vector<CollArgs> xchgP2PRounds(const CollArgs& a);

}  // namespace cclx
