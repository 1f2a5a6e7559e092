// Grouped point to point (Comm::sendRecv) and the collectives lowered onto it in one place for
// every backend: scatter, gather, gatherSingle, allGatherV, allToAllList. Each becomes a list of
// messages (peer, buffer, count) per rank; the backend runs the list as one grouped operation.
// Also reduceScatterV (its own CollType: it reduces) and the rules of both.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/comm/comm_internal.h"
#include "base/error.h"

namespace cclx {

namespace {

struct Interval {
  uintptr_t begin = 0, end = 0;
  size_t index = 0;
};

Interval span(const void* p, size_t count, size_t es, size_t index) {
  auto b = reinterpret_cast<uintptr_t>(p);
  return Interval{b, b + count * es, index};
}

bool overlap(const Interval& x, const Interval& y) { return x.begin < y.end && y.begin < x.end; }

// Sum of message counts, which must fit in size_t bytes.
size_t totalCount(const CollArgs& a) {
  const size_t es = dtypeSize(a.dtype), limit = SIZE_MAX / es;
  size_t total = 0;
  auto add = [&](size_t c) {
    CCLX_ARG_CHECK(c <= limit - total, "%s: message counts overflow", collLabel(a));
    total += c;
  };
  for (const P2PSend& m : a.sends) add(m.count);
  for (const P2PRecv& m : a.recvs) add(m.count);
  return total;
}

CollArgs grouped(CommState& st, const char* what, int root, DataType dtype, const CollOptions& o) {
  CollArgs a = baseArgs(st, CollType::SendRecv, nullptr, nullptr, 0, dtype, o);
  a.what = what;
  a.root = root;
  return a;
}

std::shared_ptr<Work> run(CommState& st, CollArgs& a) {
  a.count = totalCount(a);
  return dispatch(st, a);
}

void checkRoot(const char* what, int root, int size) {
  CCLX_ARG_CHECK(root >= 0 && root < size, "%s: root %d is outside [0, %d)", what, root, size);
}

void checkListSize(const char* what, const char* list, size_t got, int size) {
  CCLX_ARG_CHECK(got == size_t(size), "%s: %zu %s for %d ranks", what, got, list, size);
}

}  // namespace

void validateSendRecv(const CollArgs& a, int rank, int size) {
  const char* name = collLabel(a);
  const size_t es = dtypeSize(a.dtype);
  std::vector<size_t> selfSends, selfRecvs;
  for (size_t i = 0; i < a.sends.size(); ++i) {
    const P2PSend& m = a.sends[i];
    CCLX_ARG_CHECK(m.peer >= 0 && m.peer < size, "%s: send %zu: peer %d is outside [0, %d)", name,
                   i, m.peer, size);
    checkCount(m.count, a.dtype, 1);
    CCLX_ARG_CHECK(m.buf != nullptr || m.count == 0, "%s: send %zu to rank %d: buffer is null with "
                   "count %zu", name, i, m.peer, m.count);
    if (m.peer == rank) selfSends.push_back(i);
  }
  for (size_t i = 0; i < a.recvs.size(); ++i) {
    const P2PRecv& m = a.recvs[i];
    CCLX_ARG_CHECK(m.peer >= 0 && m.peer < size, "%s: receive %zu: peer %d is outside [0, %d)",
                   name, i, m.peer, size);
    checkCount(m.count, a.dtype, 1);
    CCLX_ARG_CHECK(m.buf != nullptr || m.count == 0, "%s: receive %zu from rank %d: buffer is null "
                   "with count %zu", name, i, m.peer, m.count);
    if (m.peer == rank) selfRecvs.push_back(i);
  }
  // Messages to this rank itself pair up locally, in order.
  CCLX_ARG_CHECK(selfSends.size() == selfRecvs.size(),
                 "%s: %zu send(s) to this rank (%d) but %zu receive(s) from it", name,
                 selfSends.size(), rank, selfRecvs.size());
  std::vector<bool> sendIdentity(a.sends.size(), false), recvIdentity(a.recvs.size(), false);
  for (size_t k = 0; k < selfSends.size(); ++k) {
    const P2PSend& s = a.sends[selfSends[k]];
    const P2PRecv& r = a.recvs[selfRecvs[k]];
    CCLX_ARG_CHECK(s.count == r.count,
                   "%s: send %zu to this rank (%d) has %zu elements, its receive %zu has %zu", name,
                   selfSends[k], rank, s.count, selfRecvs[k], r.count);
    if (s.buf == r.buf) sendIdentity[selfSends[k]] = recvIdentity[selfRecvs[k]] = true;
  }
  // Receive buffers are written concurrently with every read of the call: none may overlap
  // another receive or a send (a receive from itself into its own send buffer is a no-op).
  std::vector<Interval> writes;
  for (size_t i = 0; i < a.recvs.size(); ++i)
    if (a.recvs[i].count && !recvIdentity[i]) writes.push_back(span(a.recvs[i].buf, a.recvs[i].count, es, i));
  std::sort(writes.begin(), writes.end(),
            [](const Interval& x, const Interval& y) { return x.begin < y.begin; });
  for (size_t k = 1; k < writes.size(); ++k)
    CCLX_ARG_CHECK(!overlap(writes[k - 1], writes[k]), "%s: receive buffers %zu and %zu overlap",
                   name, writes[k - 1].index, writes[k].index);
  for (size_t i = 0; i < a.sends.size(); ++i) {
    if (!a.sends[i].count || sendIdentity[i]) continue;
    const Interval s = span(a.sends[i].buf, a.sends[i].count, es, i);
    // The first write that ends after s begins is the only one that can overlap it (writes are
    // disjoint and sorted, so their ends are sorted too).
    auto it = std::upper_bound(writes.begin(), writes.end(), s.begin,
                               [](uintptr_t v, const Interval& w) { return v < w.end; });
    CCLX_ARG_CHECK(it == writes.end() || !overlap(*it, s),
                   "%s: receive buffer %zu overlaps send buffer %zu", name,
                   it == writes.end() ? 0 : it->index, i);
  }
}

void validateReduceScatterV(const CollArgs& a, int rank, int size) {
  const char* name = collName(a.type);
  checkListSize(name, "send buffers", a.sendList.size(), size);
  checkListSize(name, "counts", a.recvCounts.size(), size);
  const size_t es = dtypeSize(a.dtype);
  for (int r = 0; r < size; ++r) {
    checkCount(a.recvCounts[size_t(r)], a.dtype, 1);
    checkBuf(a.sendList[size_t(r)], a.recvCounts[size_t(r)], "send list");
  }
  const size_t mine = a.recvCounts[size_t(rank)];
  checkBuf(a.recv, mine, "recv");
  if (!mine) return;
  // The output may be this rank's own input (in place), and must not overlap any other input.
  const Interval out = span(a.recv, mine, es, 0);
  for (int r = 0; r < size; ++r) {
    const size_t c = a.recvCounts[size_t(r)];
    if (!c || (r == rank && a.sendList[size_t(r)] == a.recv)) continue;
    CCLX_ARG_CHECK(!overlap(out, span(a.sendList[size_t(r)], c, es, 0)),
                   "%s: the output overlaps input %d (only input %d may be the output itself)",
                   name, r, rank);
  }
}

std::shared_ptr<Work> Comm::sendRecv(const std::vector<P2PSend>& sends,
                                     const std::vector<P2PRecv>& recvs, DataType dtype,
                                     const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::SendRecv, nullptr, nullptr, 0, dtype, o);
  a.sends = sends;
  a.recvs = recvs;
  return run(*st_, a);
}

std::shared_ptr<Work> Comm::scatter(const std::vector<const void*>& sends, void* recv,
                                    size_t count, DataType dtype, int root, const CollOptions& o) {
  CollArgs a = grouped(*st_, "Scatter", root, dtype, o);
  checkRoot(a.what, root, size());
  if (rank() == root) {
    checkListSize(a.what, "send buffers", sends.size(), size());
    for (int r = 0; r < size(); ++r) a.sends.push_back({r, sends[size_t(r)], count});
  }
  a.recvs.push_back({root, recv, count});
  return run(*st_, a);
}

std::shared_ptr<Work> Comm::gather(const void* send, const std::vector<void*>& recvs, size_t count,
                                   DataType dtype, int root, const CollOptions& o) {
  CollArgs a = grouped(*st_, "Gather", root, dtype, o);
  checkRoot(a.what, root, size());
  a.sends.push_back({root, send, count});
  if (rank() == root) {
    checkListSize(a.what, "receive buffers", recvs.size(), size());
    for (int r = 0; r < size(); ++r) a.recvs.push_back({r, recvs[size_t(r)], count});
  }
  return run(*st_, a);
}

std::shared_ptr<Work> Comm::gatherSingle(const void* send, void* recv, size_t count,
                                         DataType dtype, int root, const CollOptions& o) {
  CollArgs a = grouped(*st_, "GatherSingle", root, dtype, o);
  checkRoot(a.what, root, size());
  checkCount(count, dtype, size());
  a.sends.push_back({root, send, count});
  if (rank() == root) {
    CCLX_ARG_CHECK(recv != nullptr || count == 0, "%s: recv buffer is null with count %zu",
                   a.what, count);
    const size_t bytes = count * dtypeSize(dtype);
    for (int r = 0; r < size(); ++r)
      a.recvs.push_back({r, count ? static_cast<char*>(recv) + size_t(r) * bytes : recv, count});
  }
  return run(*st_, a);
}

std::shared_ptr<Work> Comm::allGatherV(const void* send, const std::vector<void*>& recvs,
                                       const std::vector<size_t>& counts, DataType dtype,
                                       const CollOptions& o) {
  CollArgs a = grouped(*st_, "AllGatherV", -1, dtype, o);
  checkListSize(a.what, "receive buffers", recvs.size(), size());
  checkListSize(a.what, "counts", counts.size(), size());
  const size_t mine = counts[size_t(rank())];
  for (int r = 0; r < size(); ++r) {
    a.sends.push_back({r, send, mine});
    a.recvs.push_back({r, recvs[size_t(r)], counts[size_t(r)]});
  }
  return run(*st_, a);
}

std::shared_ptr<Work> Comm::allToAllList(const std::vector<const void*>& sends,
                                         const std::vector<size_t>& sendCounts,
                                         const std::vector<void*>& recvs,
                                         const std::vector<size_t>& recvCounts, DataType dtype,
                                         const CollOptions& o) {
  CollArgs a = grouped(*st_, "AllToAllList", -1, dtype, o);
  checkListSize(a.what, "send buffers", sends.size(), size());
  checkListSize(a.what, "send counts", sendCounts.size(), size());
  checkListSize(a.what, "receive buffers", recvs.size(), size());
  checkListSize(a.what, "receive counts", recvCounts.size(), size());
  for (int r = 0; r < size(); ++r) {
    a.sends.push_back({r, sends[size_t(r)], sendCounts[size_t(r)]});
    a.recvs.push_back({r, recvs[size_t(r)], recvCounts[size_t(r)]});
  }
  return run(*st_, a);
}

std::shared_ptr<Work> Comm::reduceScatterV(const std::vector<const void*>& sends,
                                           const std::vector<size_t>& counts, void* recv,
                                           DataType dtype, ReduceOp op, const CollOptions& o) {
  CollArgs a = baseArgs(*st_, CollType::ReduceScatterV, nullptr, recv, 0, dtype, o);
  const char* name = collName(a.type);
  checkListSize(name, "send buffers", sends.size(), size());
  checkListSize(name, "counts", counts.size(), size());
  a.op = op;
  a.sendList = sends;
  a.recvCounts = counts;
  a.outCount = counts[size_t(rank())];
  const size_t limit = SIZE_MAX / dtypeSize(dtype);
  for (size_t c : counts) {  // count = every rank's block together: 0 only when all are empty
    CCLX_ARG_CHECK(c <= limit - a.count, "%s: counts overflow", name);
    a.count += c;
  }
  return dispatch(*st_, a);
}

}  // namespace cclx
