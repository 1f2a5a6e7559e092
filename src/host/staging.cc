// Temporaries for misaligned and overlapping user buffers of host collectives (staging.h).
#include "host/staging.h"

#include <cstring>

namespace cclx {

namespace {

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  if (!a || !b || !an || !bn) return false;
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

}  // namespace

void* HostStaging::stage(const void* p, size_t bytes, bool copyIn) {
  bufs_.emplace_back((bytes + 7) / 8);
  void* t = bufs_.back().data();
  if (copyIn && bytes) std::memcpy(t, p, bytes);
  if (!staged_) s_ = a_;
  staged_ = true;
  return t;
}

HostStaging::HostStaging(const CollArgs& a, int rank, int size, bool fp8) : a_(a) {
  const size_t es = dtypeSize(a.dtype), n = a.count * es, all = n * size_t(size);
  const char* send = static_cast<const char*>(a.send);
  const char* recv = static_cast<const char*>(a.recv);
  size_t in = 0, out = 0;  // bytes of the single input and output buffers
  bool inPlace = a.send == a.recv, typed = fp8;
  switch (a.type) {
    case CollType::AllReduce: in = out = n, typed = true; break;
    case CollType::Reduce: in = n, out = rank == a.root ? n : 0, typed = true; break;
    case CollType::Broadcast: in = rank == a.root ? n : 0, out = n; break;
    case CollType::AllGather:
      if (!a.recvList.empty()) return;
      in = n, out = all, inPlace = recv && send == recv + size_t(rank) * n;
      break;
    case CollType::ReduceScatter:
    case CollType::ReduceScatterQuantized:
      if (!a.sendList.empty()) return;
      in = all, out = n, inPlace = send && recv == send + size_t(rank) * n, typed = true;
      break;
    case CollType::AllToAll: in = out = all; break;
    case CollType::AllToAllV:
      for (size_t c : a.sendCounts) in += c * es;
      for (size_t c : a.recvCounts) out += c * es;
      break;
    default:
      return;  // point to point and ReduceScatterV are checked disjoint (comm_grouped.cc)
  }
  const auto misaligned = [&](const void* p) {
    return typed && reinterpret_cast<uintptr_t>(p) % es != 0;
  };
  const bool stageOut = out && misaligned(a.recv);
  const bool stageIn = in && (misaligned(a.send) || (stageOut && inPlace) ||
                              (!inPlace && overlaps(a.send, in, a.recv, out)));
  if (stageIn) s_.send = stage(a.send, in, true);
  if (stageOut) {
    out_ = a.recv;
    outBytes_ = out;
    s_.recv = stage(nullptr, out, false);
    outTmp_ = s_.recv;
  }
}

void HostStaging::finish() {
  if (out_) std::memcpy(out_, outTmp_, outBytes_);
}

}  // namespace cclx
