// Plans of the exchange collectives (see xchg.h) and their in-place rules.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/dda/dda.h"
#include "gpu/dda/xchg.h"

namespace cclx {

namespace {

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

// Bytes of all-to-all-v's packed send / receive buffers.
size_t total(const std::vector<size_t>& counts, size_t es) {
  size_t n = 0;
  for (size_t c : counts) n += c;
  return n * es;
}

}  // namespace

bool xchgNeedsStagedInput(const CollArgs& a, int rank, int size) {
  const size_t es = dtypeSize(a.dtype), B = a.count * es, N = size_t(size);
  const char* send = static_cast<const char*>(a.send);
  const char* recv = static_cast<const char*>(a.recv);
  switch (a.type) {
    case CollType::AllGather:
      return a.recvList.empty() && send != recv + size_t(rank) * B && overlaps(send, B, recv, N * B);
    case CollType::ReduceScatter:
    case CollType::ReduceScatterQuantized:
      return a.sendList.empty() && recv != send + size_t(rank) * B && overlaps(send, N * B, recv, B);
    case CollType::AllToAll: return send != recv && overlaps(send, N * B, recv, N * B);
    case CollType::Broadcast:
    case CollType::Reduce: return rank == a.root && send != recv && overlaps(send, B, recv, B);
    case CollType::AllToAllV:
      return overlaps(send, total(a.sendCounts, es), recv, total(a.recvCounts, es));
    case CollType::AllToAllVDevice:
      return overlaps(send, a.rows.sendCap * a.rows.rowElems * es, recv,
                      a.rows.recvCap * a.rows.rowElems * es);
    default: return false;
  }
}

bool xchgPlan(const CollArgs& a, int rank, int size, XchgPlan& p) {
  p = XchgPlan{};
  if (size < 2 || size > kMaxRanks) return false;
  const size_t es = dtypeSize(a.dtype), B = a.count * es, N = size_t(size), me = size_t(rank);
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  p.symmetric = a.type != CollType::AllToAllV;
  switch (a.type) {
    case CollType::AllGather:
      for (size_t r = 0; r < N; ++r) {
        p.src[r] = send;
        p.srcBytes[r] = p.dstBytes[r] = B;
        p.dst[r] = a.recvList.empty() ? recv + r * B : static_cast<char*>(a.recvList[r]);
      }
      if (!a.recvList.empty())
        for (size_t r = 0; r < N; ++r) {
          if (overlaps(send, B, p.dst[r], B) && !(r == me && p.dst[r] == send)) return false;
          for (size_t q = r + 1; q < N; ++q)
            if (overlaps(p.dst[q], B, p.dst[r], B)) return false;
        }
      break;
    case CollType::ReduceScatter:
      p.reduce = true;
      for (size_t r = 0; r < N; ++r) {
        p.src[r] = a.sendList.empty() ? send + r * B : static_cast<const char*>(a.sendList[r]);
        p.srcBytes[r] = p.dstBytes[r] = B;
        p.dst[r] = recv;
      }
      if (!a.sendList.empty())
        for (size_t r = 0; r < N; ++r)
          if (overlaps(p.src[r], B, recv, B) && !(r == me && p.src[r] == recv)) return false;
      break;
    case CollType::AllToAll:
      for (size_t r = 0; r < N; ++r) {
        p.src[r] = send + r * B;
        p.dst[r] = recv + r * B;
        p.srcBytes[r] = p.dstBytes[r] = B;
      }
      break;
    case CollType::AllToAllV: {
      if (a.sendCounts.size() != N || a.recvCounts.size() != N) return false;
      size_t so = 0, ro = 0;
      for (size_t r = 0; r < N; ++r) {
        p.src[r] = send + so;
        p.dst[r] = recv + ro;
        p.srcBytes[r] = a.sendCounts[r] * es;
        p.dstBytes[r] = a.recvCounts[r] * es;
        so += p.srcBytes[r];
        ro += p.dstBytes[r];
      }
      break;
    }
    case CollType::Broadcast: {
      // The root's buffer to every rank, itself included (a copy unless in place); between two
      // other ranks only the empty header chunks travel.
      const size_t root = size_t(a.root);
      if (a.root < 0 || root >= N) return false;
      p.symmetric = false;
      if (me == root)
        for (size_t r = 0; r < N; ++r) {
          p.src[r] = send;
          p.srcBytes[r] = B;
        }
      p.dst[root] = recv;
      p.dstBytes[root] = B;
      break;
    }
    case CollType::Reduce: {
      // A reduce-scatter-v whose only non-empty block is the root's.
      const size_t root = size_t(a.root);
      if (a.root < 0 || root >= N) return false;
      p.reduce = true;
      p.symmetric = false;
      p.src[root] = send;
      p.srcBytes[root] = B;
      for (size_t r = 0; r < N; ++r) {
        p.dst[r] = recv;
        p.dstBytes[r] = me == root ? B : 0;
      }
      break;
    }
    case CollType::ReduceScatterV:
      // Blocks of their own sizes: rank d's block goes to d; every rank's block for this rank
      // (recvCounts[rank] elements) is combined into the output.
      if (a.sendList.size() != N || a.recvCounts.size() != N) return false;
      p.reduce = true;
      p.symmetric = false;
      for (size_t r = 0; r < N; ++r) {
        p.src[r] = static_cast<const char*>(a.sendList[r]);
        p.srcBytes[r] = a.recvCounts[r] * es;
        p.dst[r] = recv;
        p.dstBytes[r] = a.recvCounts[me] * es;
      }
      break;
    case CollType::SendRecv: {
      // A collective lowered onto grouped messages (scatter, gather, all-gather-v, all-to-all
      // lists: `what` set, every rank calls it): at most one message to and from each rank, every
      // direction taking part. A round of a point-to-point batch (no `what`; not every rank takes
      // part): the same, but only the directions that have a message.
      p.symmetric = false;
      if (!a.what) p.sendMask = p.recvMask = 0;
      bool sent[kMaxRanks] = {}, got[kMaxRanks] = {};
      for (const P2PSend& m : a.sends) {
        if (m.peer < 0 || size_t(m.peer) >= N || sent[m.peer]) return false;
        sent[m.peer] = true;
        p.src[m.peer] = static_cast<const char*>(m.buf);
        p.srcBytes[m.peer] = m.count * es;
        if (!a.what) p.sendMask |= 1u << m.peer;
      }
      for (const P2PRecv& m : a.recvs) {
        if (m.peer < 0 || size_t(m.peer) >= N || got[m.peer]) return false;
        got[m.peer] = true;
        p.dst[m.peer] = static_cast<char*>(m.buf);
        p.dstBytes[m.peer] = m.count * es;
        if (!a.what) p.recvMask |= 1u << m.peer;
      }
      // Validation pairs the messages to itself (counts equal, one receive per send).
      if (p.srcBytes[me] != p.dstBytes[me] || sent[me] != got[me]) return false;
      break;
    }
    default: return false;
  }
  p.aligned = true;
  for (size_t r = 0; r < N; ++r) {
    if (!(p.sendMask >> r & 1)) p.srcBytes[r] = 0;  // directions that do not take part
    if (!(p.recvMask >> r & 1)) p.dstBytes[r] = 0;
    if (p.srcBytes[r] && (reinterpret_cast<uintptr_t>(p.src[r]) & 15)) p.aligned = false;
    if (p.dstBytes[r] && (reinterpret_cast<uintptr_t>(p.dst[r]) & 15)) p.aligned = false;
    p.maxBytes = std::max(p.maxBytes, std::max(p.srcBytes[r], p.dstBytes[r]));
  }
  return true;
}

std::vector<CollArgs> xchgP2PRounds(const CollArgs& a) {
  std::vector<CollArgs> rounds;
  int sends[kMaxRanks] = {}, recvs[kMaxRanks] = {};  // messages per peer so far
  auto round = [&](int j) -> CollArgs& {
    while (int(rounds.size()) <= j) {
      CollArgs r = a;
      r.sends.clear();
      r.recvs.clear();
      r.count = 0;
      rounds.push_back(std::move(r));
    }
    return rounds[size_t(j)];
  };
  for (const P2PSend& m : a.sends) {
    if (m.peer < 0 || m.peer >= kMaxRanks) return {};  // validated: never
    CollArgs& r = round(sends[m.peer]++);
    r.sends.push_back(m);
    r.count += m.count;
  }
  for (const P2PRecv& m : a.recvs) {
    if (m.peer < 0 || m.peer >= kMaxRanks) return {};
    CollArgs& r = round(recvs[m.peer]++);
    r.recvs.push_back(m);
    r.count += m.count;
  }
  return rounds;
}

}  // namespace cclx
