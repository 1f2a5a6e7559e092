// The output buffers of a collective call, for the failure model: a call that fails leaves them
// all-ones (a NaN in every floating-point type), never a plausible stale value
// (docs/design/failure.md). One list for every backend.
#pragma once

#include <cstring>
#include <utility>
#include <vector>

#include "core/comm/backend.h"

namespace cclx {

/// (pointer, bytes) of every buffer `a` writes on this rank (host or device memory).
inline std::vector<std::pair<void*, size_t>> outputSpans(const CollArgs& a, int size) {
  const size_t es = dtypeSize(a.dtype);
  std::vector<std::pair<void*, size_t>> out;
  auto add = [&](void* p, size_t bytes) {
    if (p && bytes) out.emplace_back(p, bytes);
  };
  switch (a.type) {
    case CollType::AllReduce:
    case CollType::Reduce:
    case CollType::Broadcast:
    case CollType::ReduceScatter:
    case CollType::Recv: add(a.recv, a.count * es); break;
    case CollType::AllGather:
      if (a.recvList.empty()) add(a.recv, size_t(size) * a.count * es);
      for (void* p : a.recvList) add(p, a.count * es);
      break;
    case CollType::AllToAll: add(a.recv, size_t(size) * a.count * es); break;
    case CollType::AllToAllV: {
      size_t n = 0;
      for (size_t c : a.recvCounts) n += c;
      add(a.recv, n * es);
      break;
    }
    case CollType::SendRecv:
      for (const P2PRecv& m : a.recvs) add(m.buf, m.count * es);
      break;
    case CollType::ReduceScatterV: add(a.recv, a.outCount * es); break;
    case CollType::AllToAllVDevice: add(a.recv, a.rows.recvCap * a.rows.rowElems * es); break;
    case CollType::ReduceScatterQuantized: add(a.recv, a.count * es); break;
    case CollType::AllReduceRmsNorm:
      add(a.rms.residualOut, a.count * es);
      add(a.rms.out, a.count * es);
      add(a.rms.fp8Out, a.count);
      add(a.rms.scales, a.rms.fp8Out ? a.rms.tokens * sizeof(float) : 0);
      break;
    case CollType::Send:
    case CollType::Barrier: break;
  }
  return out;
}

/// Host memory: fills every output of `a` with 0xFF bytes.
inline void poisonHostOutputs(const CollArgs& a, int size) {
  for (auto [p, n] : outputSpans(a, size)) std::memset(p, 0xFF, n);
}

}  // namespace cclx
