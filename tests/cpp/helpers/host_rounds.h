// What the multi-process host collective tests (tests/cpp/host) share: comms whose staging slots
// are 4 KiB (so that odd counts run through several chunks), poisoned buffers, and one checked
// call of each exchange collective (reduce-scatter in its three forms, all-gather and its list
// form, all-to-all, all-to-all-v) against the references of host_util.h. Use inside runRanks.
#pragma once

#include <cclx/cclx.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "core/settings/config.h"
#include "helpers/host_util.h"
#include "helpers/mp.h"

namespace hosttest {

using Buf = std::vector<char>;
inline Buf poisoned(size_t bytes) { return Buf(bytes, char(kPoison)); }
inline bool allPoison(const char* p, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    if (uint8_t(p[i]) != kPoison) return false;
  return true;
}

/// A CPU comm with 4 KiB staging slots (CCLX_SHM_CHUNK_BYTES, set for this process).
inline std::shared_ptr<cclx::Comm> smallSlotComm(int rank, int size, std::shared_ptr<cclx::Store> store,
                                                 cclx::Options o = testOpts()) {
  setenv("CCLX_SHM_CHUNK_BYTES", "4096", 1);
  cclx::reloadConfig();
  return cclx::test::makeCpuComm(rank, size, std::move(store), o);
}

/// runRanks of fn(comm, rank, size) on small-slot comms, each finalized once fn returns.
inline cclx::test::MpResult runSmallSlot(int n, const std::function<void(cclx::Comm&, int, int)>& fn,
                                         std::chrono::seconds timeout = std::chrono::seconds(300)) {
  return cclx::test::runRanks(
      n,
      [&](int rank, int size, std::shared_ptr<cclx::Store> store) {
        auto comm = smallSlotComm(rank, size, std::move(store));
        fn(*comm, rank, size);
        comm->finalize();
      },
      timeout);
}

/// Reduce-scatter of `send` (size() blocks of `count` elements) in form `mode`: 0 single buffer
/// into recv, 1 list into recv, 2 in place (into this rank's block of send). Returns the output.
inline void* reduceScatterForm(cclx::Comm& comm, int mode, Buf& send, Buf& recv, size_t count,
                               DataType t, cclx::ReduceOp op) {
  const size_t es = esize(t), n = size_t(comm.size());
  void* out = recv.data();
  if (mode == 1) {
    std::vector<const void*> list;
    for (size_t b = 0; b < n; ++b) list.push_back(send.data() + b * count * es);
    comm.reduceScatterList(list, out, count, t, op);
  } else {
    if (mode == 2) out = send.data() + size_t(comm.rank()) * count * es;
    comm.reduceScatter(send.data(), out, count, t, op);
  }
  return out;
}

/// All-gather of `count` elements (in place: the input is this rank's block of the output), then
/// the list form (in place: the input is this rank's entry); checks every block and the byte past
/// the end. Uses seed + 1 (and increments seed).
inline void allGatherRound(cclx::Comm& comm, DataType t, size_t count, bool inPlace, uint64_t& seed) {
  const int rank = comm.rank(), size = comm.size();
  const size_t n = size_t(size), bytes = count * esize(t);
  Buf recv = poisoned(n * bytes + 1), send(bytes);
  fillBytes(send.data(), bytes, ++seed, rank);
  const void* in = send.data();
  if (inPlace) {
    std::memcpy(recv.data() + size_t(rank) * bytes, send.data(), bytes);
    in = recv.data() + size_t(rank) * bytes;
  }
  comm.allGather(in, recv.data(), count, t);
  for (int p = 0; p < size; ++p)
    MP_CHECK(bytesMatch(recv.data() + size_t(p) * bytes, bytes, seed, p),
             "all-gather %s count %zu block %d", dtypeName(t), count, p);
  MP_CHECK(uint8_t(recv[n * bytes]) == kPoison, "all-gather wrote past the end");
  std::vector<Buf> outs(n, poisoned(bytes));
  std::vector<void*> ptrs;
  for (auto& o : outs) ptrs.push_back(o.data());
  if (inPlace) std::memcpy(ptrs[size_t(rank)], send.data(), bytes);
  comm.allGatherList(inPlace ? ptrs[size_t(rank)] : send.data(), ptrs, count, t);
  for (int p = 0; p < size; ++p)
    MP_CHECK(bytesMatch(outs[size_t(p)].data(), bytes, seed, p), "all-gather list %s block %d",
             dtypeName(t), p);
}

/// All-to-all of `count` elements per block, in place or not: block b of rank r's input is bytes
/// [b*bytes, (b+1)*bytes) of stream r; it lands in block r of rank b's output. Checks every block
/// and the byte past the end. Uses seed + 1 (and increments seed).
inline void allToAllRound(cclx::Comm& comm, DataType t, size_t count, bool inPlace, uint64_t& seed) {
  const int rank = comm.rank(), size = comm.size();
  const size_t n = size_t(size), bytes = count * esize(t);
  Buf send(n * bytes), recv = poisoned(n * bytes + 1);
  fillBytes(send.data(), n * bytes, ++seed, rank);
  void* out = inPlace ? send.data() : recv.data();
  comm.allToAll(send.data(), out, count, t);
  for (int p = 0; p < size; ++p)
    MP_CHECK(bytesMatch(static_cast<char*>(out) + size_t(p) * bytes, bytes, seed, p,
                        size_t(rank) * bytes),
             "all-to-all %s count %zu block %d", dtypeName(t), count, p);
  MP_CHECK(uint8_t(recv[n * bytes]) == kPoison, "all-to-all wrote past the end");
}

/// All-to-all-v in round `round`, in place or not: rank src sends cnt(src, dst, round) elements
/// to rank dst (its input is the stream of rank src, packed in rank order). Checks every block
/// and (out of place) the byte past the end. Uses seed + 1 (and increments seed).
inline void allToAllVRound(cclx::Comm& comm, DataType t, bool inPlace, int round, uint64_t& seed,
                           const std::function<size_t(int src, int dst, int round)>& cnt) {
  const int rank = comm.rank(), size = comm.size();
  const size_t n = size_t(size), es = esize(t);
  std::vector<size_t> sc(n), rc(n);
  size_t st = 0, rt = 0;
  for (int p = 0; p < size; ++p) {
    sc[size_t(p)] = cnt(rank, p, round);
    rc[size_t(p)] = cnt(p, rank, round);
    st += sc[size_t(p)];
    rt += rc[size_t(p)];
  }
  Buf send(std::max<size_t>(std::max(st, rt), 1) * es), recv = poisoned(rt * es + 1);
  fillBytes(send.data(), st * es, ++seed, rank);
  void* out = inPlace ? send.data() : recv.data();
  comm.allToAllV(send.data(), sc, out, rc, t);
  size_t roff = 0;
  for (int p = 0; p < size; ++p) {
    size_t soff = 0;  // offset of block `rank` in p's input
    for (int q = 0; q < rank; ++q) soff += cnt(p, q, round);
    MP_CHECK(bytesMatch(static_cast<char*>(out) + roff * es, rc[size_t(p)] * es, seed, p, soff * es),
             "all-to-all-v round %d %s from %d", round, dtypeName(t), p);
    roff += rc[size_t(p)];
  }
  if (!inPlace) MP_CHECK(uint8_t(recv[rt * es]) == kPoison, "all-to-all-v wrote past the end");
}

}  // namespace hosttest
