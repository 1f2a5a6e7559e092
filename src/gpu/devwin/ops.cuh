// Device windows, device side (include/cclx/device_window.h; docs/design/device-window.md): every
// method of cclx::DeviceWindow (<cclx/device_window.cuh>) and of torchcomms'
// TorchCommDeviceWindow<CclxDeviceBackend> (<cclx/torchcomms/device_window.cuh>), written once
// over the handle's two parts. Memory accesses with an ordering go through device/prims.cuh, the
// waits through dev::Waiter (device/fail.cuh), the copy through device/copy.cuh.
//
// Contract shared by every function below:
//  * A group (DevScope) calls together: THREAD one thread, WARP all 32 lanes of a converged warp,
//    BLOCK every thread of the block; the arguments are the same in every thread of the group.
//    Its thread 0 (flattened index) is the leader, which alone touches flags.
//  * Bad arguments (ranks, ids, byte ranges, scopes, operations) return kDevWinInvalid before
//    anything is read or written.
//  * Failure model: put, signal and the waits read this window's failure word and the comm's
//    abort word first; once either is set nothing is pushed to a peer and they return
//    kDevWinFailed (the window's failure word is then set: sticky). A wait polls through a Waiter
//    with the comm's timeout: a wait that stops (deadline: recorded in the error words naming the
//    rank it waited for, the abort word raised on every rank; abort word; the host's abort
//    request) returns kDevWinFailed, and the first failed wait of this window on this rank fills
//    this rank's window with 0xFF bytes, so a caller that ignores the status never reads stale
//    data as new. The host learns of it from the error words (its next call, a Work, the
//    watchdog).
//  * Ordering (PTX memory model): a group barrier (bar.sync / bar.warp.sync) followed by the
//    leader's release at system scope publishes every store of the group before it (puts
//    included) to whoever acquires the flag; a wait's acquire followed by a group barrier makes
//    them visible to every thread of the waiting group.
#pragma once

#include <cclx/device_window.h>

#include <cstddef>
#include <cstdint>

#include "gpu/device/copy.cuh"
#include "gpu/device/fail.cuh"
#include "gpu/device/prims.cuh"

namespace cclx {
namespace devwin {

static_assert(kDevWinMaxRanks == kMaxRanks, "a device window spans the ranks peer memory does");

// ---- groups ----

struct Group {
  DevScope scope;
  int tid, n;
};

__device__ __forceinline__ bool validScope(DevScope s) {
  return s == DevScope::THREAD || s == DevScope::WARP || s == DevScope::BLOCK;
}

/// This thread's place in a group of scope s (valid scopes only).
__device__ __forceinline__ Group groupOf(DevScope s) {
  const int flat = int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  if (s == DevScope::WARP) return {s, flat & 31, 32};
  if (s == DevScope::BLOCK) return {s, flat, int(blockDim.x * blockDim.y * blockDim.z)};
  return {DevScope::THREAD, 0, 1};
}

/// Barrier of the group with memory ordering among its threads (nothing for one thread).
__device__ __forceinline__ void groupSync(const Group& g) {
  if (g.scope == DevScope::WARP) dev::syncWarp32();
  else if (g.scope == DevScope::BLOCK) __syncthreads();
}

/// groupSync that also returns whether v holds in any thread of the group.
__device__ __forceinline__ bool groupAny(const Group& g, bool v) {
  if (g.scope == DevScope::WARP) {
    dev::syncWarp32();
    return dev::any32(v);
  }
  if (g.scope == DevScope::BLOCK) return dev::syncThreadsOr(v) != 0;
  return v;
}

__device__ __forceinline__ bool cmpHolds(DevCmp cmp, uint64_t current, uint64_t value) {
  switch (cmp) {
    case DevCmp::EQ: return current == value;
    case DevCmp::NE: return current != value;
    case DevCmp::LT: return current < value;
    case DevCmp::LE: return current <= value;
    case DevCmp::GT: return current > value;
    case DevCmp::GE: return current >= value;
  }
  return false;
}
__device__ __forceinline__ bool validCmp(DevCmp c) { return int(c) >= 0 && int(c) <= 5; }

// ---- addresses in the resource areas (include/cclx/device_window.h) ----

/// Rank `owner`'s signal slot [sid][sender].
__device__ __forceinline__ uint64_t* signalSlot(const DeviceWindowComm& c, int owner, int sid,
                                                int sender) {
  return reinterpret_cast<uint64_t*>(c.res[owner] + c.signalOffset) + size_t(sid) * c.size + sender;
}
/// Rank `owner`'s barrier slot [bid][sender].
__device__ __forceinline__ uint64_t* barrierSlot(const DeviceWindowComm& c, int owner, int bid,
                                                 int sender) {
  return reinterpret_cast<uint64_t*>(c.res[owner] + c.barrierOffset) + size_t(bid) * c.size +
         sender;
}
__device__ __forceinline__ uint64_t* counterWord(const DeviceWindowComm& c, int cid) {
  return reinterpret_cast<uint64_t*>(c.res[c.rank] + c.counterOffset) + cid;
}
__device__ __forceinline__ uint64_t* epochWord(const DeviceWindowComm& c, int bid) {
  return reinterpret_cast<uint64_t*>(c.res[c.rank] + c.epochOffset) + bid;
}
/// This window's failure word on this rank: bit 0 failed, bit 1 poisoned.
__device__ __forceinline__ uint32_t* stateWord(const DeviceWindowComm& c) {
  return reinterpret_cast<uint32_t*>(c.res[c.rank] + c.stateOffset);
}

// ---- the failure model ----

__device__ __forceinline__ FailParams failOf(const DeviceWindowComm& c) {
  FailParams f;
  for (int r = 0; r < kMaxRanks; ++r) f.ctl[r] = c.ctl[r];
  f.err = c.err;
  f.timeoutNs = c.timeoutNs;
  f.timeoutMs = c.timeoutMs;
  f.rank = c.rank;
  f.size = c.size;
  return f;
}

/// Leader: true when this window failed before or the comm's abort word is raised (then recorded
/// in the error words and the window marked failed).
__device__ __forceinline__ bool failedNow(const DeviceWindowComm& c) {
  if (dev::ldVolatile4(reinterpret_cast<const char*>(stateWord(c))) != 0) return true;
  const FailParams f = failOf(c);
  if (dev::abortWord(f) == 0) return false;
  dev::noteAbort(f);
  atomicOr(stateWord(c), 1u);
  return true;
}

/// Leader: spins until ready(suspect) (which names the rank it still waits for in `suspect`)
/// through a Waiter with the comm's timeout; false when the wait stopped (recorded).
template <class Ready>
__device__ __forceinline__ bool spinUntil(const DeviceWindowComm& c, Ready&& ready) {
  const FailParams f = failOf(c);
  dev::Waiter w(f, dev::deadlineAfter(f.timeoutNs));
  int suspect = c.rank;
  while (!ready(suspect))
    if (!w.again(suspect)) return false;
  return true;
}

/// A wait of group g stopped (in some thread of it): the window is marked failed, and the first
/// failed wait poisons this rank's window with the group's threads.
__device__ __forceinline__ int failWait(const DeviceWindowComm& c, const DeviceWindowPeers& w,
                                        const Group& g) {
  bool first = false;
  if (g.tid == 0) first = (atomicOr(stateWord(c), 3u) & 2u) == 0;
  if (groupAny(g, first)) {
    dev::poison(w.base[c.rank], size_t(c.windowBytes), size_t(g.tid), size_t(g.n));
    dev::fenceSystem();
    groupSync(g);
  }
  return kDevWinFailed;
}

/// The entry of put and signal: kDevWinFailed (in every thread of g) when the window or the comm
/// failed; otherwise a group barrier that orders the group's earlier stores before the leader's
/// flags.
__device__ __forceinline__ int pushEntry(const DeviceWindowComm& c, const Group& g) {
  bool stop = false;
  if (g.tid == 0) stop = failedNow(c);
  return groupAny(g, stop) ? kDevWinFailed : kDevWinOk;
}

// ---- signals ----

/// Leader: slot [sid][this rank] of rank `peer` = value (SET, release) or += value (ADD, release
/// add), at system scope.
__device__ __forceinline__ void pushSignal(const DeviceWindowComm& c, int peer, int sid,
                                           DevSignalOp op, uint64_t value) {
  uint64_t* slot = signalSlot(c, peer, sid, c.rank);
  if (op == DevSignalOp::ADD) dev::atomAddReleaseSys(slot, value);
  else dev::stReleaseSys(slot, value);
}

/// signal(peer, sid, op, value): after every store of the group so far (puts included) is visible
/// to a reader that acquires the slot.
__device__ __forceinline__ int signal(const DeviceWindowComm& c, int peer, int sid,
                                      DevSignalOp op, uint64_t value, DevScope s) {
  if (!validScope(s) || peer < 0 || peer >= c.size || sid < 0 || sid >= c.signalCount ||
      (op != DevSignalOp::SET && op != DevSignalOp::ADD))
    return kDevWinInvalid;
  const Group g = groupOf(s);
  if (pushEntry(c, g) != kDevWinOk) return kDevWinFailed;
  if (g.tid == 0) pushSignal(c, peer, sid, op, value);
  return kDevWinOk;
}

/// Sum of this rank's slots [sid][*] (peer < 0) or slot [sid][peer], each loaded with acquire.
__device__ __forceinline__ uint64_t signalValue(const DeviceWindowComm& c, int sid, int peer,
                                                int* suspect) {
  if (peer >= 0) {
    *suspect = peer;
    return dev::ldAcquireSys(signalSlot(c, c.rank, sid, peer));
  }
  uint64_t sum = 0, least = ~uint64_t(0);
  for (int r = 0; r < c.size; ++r) {
    const uint64_t v = dev::ldAcquireSys(signalSlot(c, c.rank, sid, r));
    sum += v;
    if (r != c.rank && v < least) {  // an aggregated wait names the peer that sent the least
      least = v;
      *suspect = r;
    }
  }
  return sum;
}

/// wait_signal (peer < 0: the sum over every sender) / wait_signal_from (peer >= 0): until
/// `value <cmp>` holds; then every store the signallers made before their signals is visible to
/// the group.
__device__ __forceinline__ int waitSignal(const DeviceWindowComm& c, const DeviceWindowPeers& w,
                                          int sid, int peer, DevCmp cmp, uint64_t value,
                                          DevScope s) {
  if (!validScope(s) || !validCmp(cmp) || sid < 0 || sid >= c.signalCount || peer >= c.size)
    return kDevWinInvalid;
  const Group g = groupOf(s);
  bool stop = false;
  if (g.tid == 0) {
    stop = failedNow(c) || !spinUntil(c, [&](int& suspect) {
      return cmpHolds(cmp, signalValue(c, sid, peer < 0 ? -1 : peer, &suspect), value);
    });
  }
  if (groupAny(g, stop)) return failWait(c, w, g);
  dev::fenceAfterWait();
  return kDevWinOk;
}

__device__ __forceinline__ uint64_t readSignal(const DeviceWindowComm& c, int sid) {
  if (sid < 0 || sid >= c.signalCount) return 0;
  int suspect = 0;
  return signalValue(c, sid, -1, &suspect);
}

/// Every slot [sid][*] of this rank = 0, after the group's earlier accesses. A signal in flight
/// meanwhile may be lost: reset only what no peer signals any more (e.g. between barriers).
__device__ __forceinline__ void resetSignal(const DeviceWindowComm& c, int sid, DevScope s) {
  if (!validScope(s) || sid < 0 || sid >= c.signalCount) return;
  const Group g = groupOf(s);
  groupSync(g);
  if (g.tid == 0)
    for (int r = 0; r < c.size; ++r) dev::stReleaseSys(signalSlot(c, c.rank, sid, r), 0);
}

// ---- puts and counters ----

/// put: `bytes` from src + srcOffset (device memory of this GPU; srcBytes > 0: the source
/// buffer's size, checked) to rank dst's window at dstOffset, by the group's threads (plain
/// stores, 16 bytes at a time where both sides allow). Then, when asked: counter cid += 1 (the
/// source may be reused: every load of it completed) and signal sid of dst += 1 (release: the
/// data is visible to whoever acquires it). Without a signal nothing orders the stores: a later
/// signal (or barrier) of this group publishes them.
__device__ __forceinline__ int put(const DeviceWindowComm& c, const DeviceWindowPeers& w,
                                   size_t dstOffset, const void* src, size_t srcBytes,
                                   size_t srcOffset, int dst, size_t bytes, int sid, int cid,
                                   DevScope s) {
  if (!validScope(s) || dst < 0 || dst >= c.size || dstOffset > c.windowBytes ||
      bytes > c.windowBytes - dstOffset || (bytes != 0 && src == nullptr) ||
      (srcBytes != 0 && (srcOffset > srcBytes || bytes > srcBytes - srcOffset)) || sid < -1 ||
      sid >= c.signalCount || cid < -1 || cid >= c.counterCount)
    return kDevWinInvalid;
  const Group g = groupOf(s);
  if (pushEntry(c, g) != kDevWinOk) return kDevWinFailed;
  dev::copyBytes(static_cast<const char*>(src) + srcOffset, w.base[dst] + dstOffset, bytes,
                 size_t(g.tid), size_t(g.n));
  if (sid < 0 && cid < 0) return kDevWinOk;
  groupSync(g);  // every thread's stores before the leader's release
  if (g.tid == 0) {
    if (cid >= 0) dev::atomAddReleaseSys(counterWord(c, cid), 1);
    if (sid >= 0) pushSignal(c, dst, sid, DevSignalOp::ADD, 1);
  }
  return kDevWinOk;
}

__device__ __forceinline__ uint64_t readCounter(const DeviceWindowComm& c, int cid) {
  return cid < 0 || cid >= c.counterCount ? 0 : dev::ldAcquireSys(counterWord(c, cid));
}

/// wait_counter: until `counter <cmp> value` (this rank's puts that named the counter); a wait
/// that times out names this rank.
__device__ __forceinline__ int waitCounter(const DeviceWindowComm& c, const DeviceWindowPeers& w,
                                           int cid, DevCmp cmp, uint64_t value, DevScope s) {
  if (!validScope(s) || !validCmp(cmp) || cid < 0 || cid >= c.counterCount) return kDevWinInvalid;
  const Group g = groupOf(s);
  bool stop = false;
  if (g.tid == 0) {
    stop = failedNow(c) || !spinUntil(c, [&](int& suspect) {
      suspect = c.rank;
      return cmpHolds(cmp, dev::ldAcquireSys(counterWord(c, cid)), value);
    });
  }
  if (groupAny(g, stop)) return failWait(c, w, g);
  return kDevWinOk;
}

__device__ __forceinline__ void resetCounter(const DeviceWindowComm& c, int cid, DevScope s) {
  if (!validScope(s) || cid < 0 || cid >= c.counterCount) return;
  const Group g = groupOf(s);
  groupSync(g);
  if (g.tid == 0) dev::stReleaseSys(counterWord(c, cid), 0);
}

// ---- completion and barriers ----

/// fence: every store this thread made before (puts included) is ordered before every store it
/// makes after, for every observer (a system-scope fence).
__device__ __forceinline__ int fence() {
  dev::fenceSystem();
  return kDevWinOk;
}

/// flush: local completion of the group's puts (their loads of the source are done): a group
/// barrier. Puts are stores by the calling threads, so there is nothing else to wait for.
__device__ __forceinline__ int flush(DevScope s) {
  if (!validScope(s)) return kDevWinInvalid;
  groupSync(groupOf(s));
  return kDevWinOk;
}

/// barrier(bid): every rank's group arrives (its earlier stores released at system scope) and
/// waits for every other rank's arrival at the same count of barrier bid (counts only grow:
/// this rank's k-th barrier bid waits for every rank's k-th). One group per id at a time.
__device__ __forceinline__ int barrier(const DeviceWindowComm& c, const DeviceWindowPeers& w,
                                       int bid, DevScope s) {
  if (!validScope(s) || bid < 0 || bid >= c.barrierCount) return kDevWinInvalid;
  const Group g = groupOf(s);
  groupSync(g);  // the group's earlier stores before the arrival below
  bool stop = false;
  if (g.tid == 0) {
    stop = failedNow(c);
    if (!stop) {
      uint64_t* ep = epochWord(c, bid);
      const uint64_t e = dev::ldRelaxedSys(ep) + 1;
      dev::stReleaseSys(ep, e);
      for (int i = 1; i < c.size; ++i)
        dev::stReleaseSys(barrierSlot(c, (c.rank + i) % c.size, bid, c.rank), e);
      int next = 1;  // peers before it have arrived
      stop = !spinUntil(c, [&](int& suspect) {
        for (; next < c.size; ++next) {
          const int p = (c.rank + next) % c.size;
          suspect = p;
          if (dev::ldAcquireSys(barrierSlot(c, c.rank, bid, p)) < e) return false;
        }
        return true;
      });
    }
  }
  if (groupAny(g, stop)) return failWait(c, w, g);
  dev::fenceAfterWait();
  return kDevWinOk;
}

// ---- addresses ----

/// Rank peer's window as this GPU addresses it (this rank: its own), null for a bad rank.
__device__ __forceinline__ void* peerAddress(const DeviceWindowComm& c, const DeviceWindowPeers& w,
                                             int peer) {
  return peer < 0 || peer >= c.size ? nullptr : w.base[peer];
}

/// No multicast (NVLS) mappings: always null.
__device__ __forceinline__ void* multimemAddress(size_t) { return nullptr; }

}  // namespace devwin
}  // namespace cclx
