// Peer memory: for ranks of one host whose GPUs have P2P access between every pair (or that
// share a GPU: several processes on one device), each rank allocates a signal area at setup and
// its staging regions when a call first needs them, and every rank maps every peer's. The ranks
// share them in one of two ways, chosen alike on every rank at setup (core/sharing/peer_share.h,
// gpu/peer_share.h): 'V', cuMem allocations whose file descriptors travel over unix sockets
// (base/fd_pass.h) and which stay valid in the peers after their owner dies, where every rank
// can; else 'H', legacy CUDA IPC (HIP builds: fine-grained memory, gpurt::mallocPeerVisible, over
// HIP IPC). The pointers below are valid in this process (peer pointers are mappings over
// NVLink/PCIe, or of the same device).
//
// Staging regions (S = stagingBytes = CCLX_DDA_STAGING_BYTES, the cap; each region a fixed share
// of S in 22nds, rounded down to 256 bytes; the 176 MiB default gives the sizes in brackets):
//   [kFlat]       1/22 (8 MiB)    LL16 packet slots, two sets by epoch: the DDA flat allreduce and
//                                 the LL exchange (all-gather, reduce-scatter, all-to-all), which
//                                 share its counters (dda/ll.cuh)
//   [kTree]       3/22 (24 MiB)   DDA tree allreduce: reduce-scatter inbox + all-gather inbox
//   [kLamport]    4/22 (32 MiB)   DDA Lamport allreduce: inboxes [parity][src], 0xFF at init
//   [kFp8]        4/22 (32 MiB)   FP8 collectives (gpu/fp8/*.cu); owned entirely by them
//   [kFp8OneShot] 7/22 (56 MiB)   FP8 one-shot allreduce: inboxes [parity][src], 0xFF at init
//   [kXchg]       3/22 (24 MiB)   DDA pipelined exchange (dda/xchg_pipe.cu): inboxes
//                                 [src][block][parity]
//   [kFused]      F (32 MiB)      fused allreduce + RMSNorm (gpu/fused): two parity halves of
//                                 inboxes, 0xFF at init (F = CCLX_FUSED_STAGING_BYTES rounded up
//                                 to 4 KiB; its own size, not a share of S)
// Each region is its own allocation, made on every rank at the first call whose algorithm needs
// it (peerMemGrow), so a comm holds only what its calls used, at most S + F. Regions are disjoint so
// that one protocol's late readers are never overwritten by another protocol that a faster peer
// already started (two algorithms share a region only when they share its protocol and counters).
//
// Signal area layout (bytes, kSignalBytes total, allocated and zeroed at setup):
//   [0,       64 KiB)   barrier kernel flags: uint64 [kMaxRanks] (index = source rank)
//   [64 KiB, 256 KiB)   DDA tree flags: uint64 [2 phases][kMaxBlocks][kMaxRanks]
//   [256 KiB, 512 KiB)  FP8 collectives (free layout, owned by gpu/fp8/*.cu)
//   [512 KiB, +4 KiB)   control words: the comm's abort word (a timeout's and the host's) and the
//                       missing-rank mask (gpu/algo.h kCtl*, device/fail.cuh; written by any
//                       rank, never reset)
//   [516 KiB, +4 KiB)   growth records, one per staging region (128 bytes each): a uint64 state
//                       (0 none, 1 published, 2 allocation failed) and the region's IPC handle
//                       ('H') or its mapped size ('V': the descriptors follow by mailbox),
//                       written by the owner (host copies), read by the peers (peerMemGrow)
//   [520 KiB, +64 KiB)  DDA pipelined exchange flags: uint64 data [src][kMaxBlocks] and acks
//                       [dst][kMaxBlocks] (dda/xchg_pipe.cu)
//   [584 KiB,   1 MiB)  one-sided windows (gpu/window/): one 1 KiB slot per live window:
//                       uint64 signal counts [kMaxRanks] (64 bytes apart, index = source rank,
//                       added to by the source), then uint64 waits consumed [kMaxRanks] (local)
// Flags only ever increase (no resets): a waiter compares against the value it expects.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/backend.h"
#include "core/failure/setup_sequence.h"

namespace cclx {

class FdMailbox;

constexpr int kMaxRanks = 8;       // largest world size with peer memory
constexpr int kMaxBlocks = 128;    // largest grid of any peer-memory kernel
constexpr size_t kSignalBytes = 1u << 20;

enum class StagingRegion : int {
  kFlat = 0,
  kTree = 1,
  kLamport = 2,
  kFp8 = 3,
  kFp8OneShot = 4,
  kXchg = 5,
  kFused = 6,
};
constexpr int kNumStagingRegions = 7;
/// A set of staging regions (bit r: StagingRegion r), what an algorithm needs.
constexpr uint32_t regionBit(StagingRegion r) { return 1u << int(r); }
const char* regionName(StagingRegion r);

enum class SignalRegion : int {
  kBarrier = 0,
  kTree = 1,
  kFp8 = 2,
  kControl = 3,
  kGrow = 4,
  kXchg = 5,
  kWindow = 6,
};

struct PeerSetup {
  int rank = 0;
  int size = 1;
  int device = -1;  // this rank's CUDA device (current when peerMemOpen is called)
  Config cfg;       // ddaEnable, ddaStagingBytes
  std::chrono::milliseconds timeout{600000};  // bounds local waits (kInfiniteTimeout: none)
  std::string settings;  // the settings every rank must share (core/settings/settings_check.h), encoded
  int smCount = 0;       // this rank's SM count (the ranks agree on the smallest)
};

struct PeerMem {
  bool usable = false;      // false: DDA/FP8 peer kernels must not run (NCCL for everything)
  std::string whyNot;       // reason when !usable (logged at INFO)
  std::string sharing;      // "ranks 0 and 3 share GPU <bus id>" when some ranks share a GPU
  int smCount = 0;          // the smallest SM count of the ranks (grids that index shared slots)
  // The setup sequence broke on this rank after it published its buffer: peers may have mapped
  // it, so it is never freed (peerMemClose leaks it). `abortPeers`: this rank also opened every
  // peer's buffer and voted for it, so peers may have finished setup believing it succeeded; the
  // caller raises the comm's abort word on every rank (peer pointers below stay set for that).
  bool abandoned = false;
  bool abortPeers = false;
  int rank = 0;             // this rank (global rank == index below)
  int size = 1;
  int device = -1;
  size_t stagingBytes = 0;  // the cap S per rank: each region but kFused a fixed share of it
  size_t fusedBytes = 0;    // F: region kFused's capacity
  char* regions[kNumStagingRegions][kMaxRanks] = {};  // [region][r]: rank r's region (null: none yet)
  char* signal[kMaxRanks] = {};    // signal[r]: rank r's signal area
  // How the buffers are shared (core/sharing/peer_share.h): 'V' or 'H', the same on every rank.
  char share = 'H';
  std::shared_ptr<FdMailbox> mailbox;  // 'V': where this rank receives the peers' descriptors
  std::string mailboxes[kMaxRanks];    // 'V': every rank's mailbox address
  size_t signalSize[kMaxRanks] = {};   // 'V': the mapped size of each rank's signal area
  size_t regionSize[kNumStagingRegions][kMaxRanks] = {};  // 'V': the same for staging
  uint32_t allocated = 0;   // regions allocated on every rank and mapped here (regionBit)
  uint32_t failed = 0;      // regions whose allocation failed on some rank: never used
  int growths = 0;          // peerMemGrow calls that allocated something (the same on every rank)

  /// Capacity of a staging region (identical on all ranks, whether allocated or not).
  size_t regionBytes(StagingRegion r) const;
  /// Rank `peer`'s region r, null until a call needed it (peerMemGrow).
  char* region(int peer, StagingRegion r) const { return regions[int(r)][peer]; }
  /// True when region r may be used (allocated already, or allocatable: not failed).
  bool regionUsable(StagingRegion r) const { return !(failed & regionBit(r)); }
  /// Bytes of staging this rank holds now.
  size_t allocatedBytes() const;
  static size_t signalOffset(SignalRegion r) {
    switch (r) {
      case SignalRegion::kBarrier: return 0;
      case SignalRegion::kTree: return 64u << 10;
      case SignalRegion::kFp8: return 256u << 10;
      case SignalRegion::kControl: return 512u << 10;
      case SignalRegion::kGrow: return 516u << 10;
      case SignalRegion::kXchg: return 520u << 10;
      case SignalRegion::kWindow: break;
    }
    return 584u << 10;
  }
  static size_t signalRegionBytes(SignalRegion r) {
    switch (r) {
      case SignalRegion::kBarrier: return 64u << 10;
      case SignalRegion::kTree: return 192u << 10;
      case SignalRegion::kFp8: return 256u << 10;
      case SignalRegion::kControl: return 4u << 10;
      case SignalRegion::kGrow: return 4u << 10;
      case SignalRegion::kXchg: return 64u << 10;
      case SignalRegion::kWindow: break;
    }
    return 440u << 10;
  }
  char* signalRegion(int peer, SignalRegion r) const { return signal[peer] + signalOffset(r); }
};

/// Collective over the comm, a fixed sequence of three exchanges that every rank runs to the end
/// (core/failure/setup_sequence.h): "peer/who" (host identity, pid, PCI bus id, SM count, how
/// the rank can share memory and the settings every rank must share: a mismatch fails `seq` on
/// every rank, naming the settings and ranks), "peer/handle" (each rank's signal area allocated,
/// zeroed and exported, or why not; staging comes later, peerMemGrow) and "peer/vote" (every
/// peer's signal area opened, or why not; 'V': the descriptors pass between the ranks' mailboxes
/// first, bounded by the timeout). Peer memory is usable when every rank
/// voted for it (one host, 2..kMaxRanks ranks, one process per rank, P2P between every pair of
/// distinct GPUs, cfg.ddaEnable, every allocation and mapping done); every rank that completes
/// the sequence reaches the same verdict. Failures that only turn peer memory off (allocation,
/// IPC) leave pm.whyNot; the others fail `seq` (the caller throws). Sizes outside 2..kMaxRanks
/// exchange nothing. Must be called with the comm's device current. Never throws.
void peerMemOpen(PeerMem& pm, const PeerSetup& setup, SetupSequence& seq);

/// The abort word a failed growth leaves for the caller to raise on every rank (gpu/algo.h
/// kAbort*, kCtl*): this rank's own timeout (word = kAbortTimeout << 16 | rank + 1, the ranks it
/// waited for, its timeout), or the word of the peer whose abort stopped the wait, passed on as
/// it came (origin, reason, missing ranks, timeout), so that a rank that only relays an abort
/// never appears as its cause. word 0: nothing to forward (a plain host abort).
struct GrowAbort {
  uint32_t word = 0, missing = 0, timeoutMs = 0;
};

/// Collective growth: allocates this rank's staging regions in `want` (regionBit set) that are not
/// allocated yet, initializes them (0, or 0xFF for the data-as-flag inboxes), publishes them in
/// its growth records and opens every peer's, polling the peers' records through the mapped
/// signal areas (host copies on `stream`, a non-blocking stream of this comm's device; no store
/// or NCCL involved; 'V': one datagram per peer then carries the new regions' descriptors). Every rank must call it at the same call with the same set: the set
/// comes from the selected algorithm, which every rank derives identically. Returns false when an
/// allocation failed on some rank (every rank learns it from the records): those regions are
/// marked failed and never used; the call then chooses again (tests fail a chosen growth this way:
/// CCLX_TEST_GROW_FAIL, core/failure/grow_fault.h). Throws cclxTimeout naming the
/// ranks whose records did not appear within `timeout`, and stops early when the comm's abort
/// word is raised (the error a kernel would report); either way *abortOut holds the word to
/// raise (GrowAbort).
bool peerMemGrow(PeerMem& pm, uint32_t want, std::chrono::milliseconds timeout, void* stream,
                 GrowAbort* abortOut);

/// Unmaps the peers' buffers (signal areas and staging) and frees this rank's (nothing when
/// pm.abandoned: what was mapped stays, counted in a log line). Safe on a PeerMem that was never opened.
void peerMemClose(PeerMem& pm);
/// Forgets the buffers without unmapping or freeing anything (kernels or peers may still use
/// them); returns the bytes of this rank's buffer left allocated.
size_t peerMemLeak(PeerMem& pm);

}  // namespace cclx
