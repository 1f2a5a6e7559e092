// CUDA IPC peer memory: for ranks of one host whose GPUs have P2P access between every pair (or
// that share a GPU: several processes on one device), each rank allocates a staging buffer and a
// signal area, and every rank maps every peer's with CUDA IPC. The pointers below are valid in
// this process (peer pointers are IPC mappings over NVLink/PCIe, or of the same device). HIP
// builds allocate the buffer fine-grained (gpurt::mallocPeerVisible) and map it with HIP IPC.
//
// Staging layout (bytes, S = stagingBytes, every region 256-byte aligned):
//   [kFlat]       [0, S/22)        DDA flat allreduce: LL16 packet slots, two sets by epoch
//   [kTree]       [S/22, 4S/22)    DDA tree allreduce: reduce-scatter inbox + all-gather inbox
//   [kLamport]    [4S/22, 8S/22)   DDA Lamport allreduce: inboxes [parity][src], 0xFF at init
//   [kFp8]        [8S/22, 12S/22)  FP8 collectives (gpu/fp8/*.cu); owned entirely by them
//   [kFp8OneShot] [12S/22, S)      FP8 one-shot allreduce: inboxes [parity][src], 0xFF at init
// (boundaries rounded down to 256 bytes; the 176 MiB default gives 8 / 24 / 32 / 32 / 80 MiB)
// Regions are disjoint so that one algorithm's late readers are never overwritten by another
// algorithm that a faster peer already started.
//
// Signal area layout (bytes, kSignalBytes total, zeroed before the handles are published):
//   [0,       64 KiB)   barrier kernel flags: uint64 [kMaxRanks] (index = source rank)
//   [64 KiB, 256 KiB)   DDA tree flags: uint64 [2 phases][kMaxBlocks][kMaxRanks]
//   [256 KiB, 512 KiB)  FP8 collectives (free layout, owned by gpu/fp8/*.cu)
//   [512 KiB, +4 KiB)   control words: the comm's abort word (a timeout's and the host's) and the
//                       missing-rank mask (gpu/algo.h kCtl*, device/fail.cuh; written by any
//                       rank, never reset)
//   [516 KiB,   1 MiB)  one-sided windows (gpu/window/): one 1 KiB slot per live window:
//                       uint64 signal counts [kMaxRanks] (64 bytes apart, index = source rank,
//                       added to by the source), then uint64 waits consumed [kMaxRanks] (local)
// Flags only ever increase (no resets): a waiter compares against the value it expects.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/backend.h"

namespace cclx {

constexpr int kMaxRanks = 8;       // largest world size with peer memory
constexpr int kMaxBlocks = 128;    // largest grid of any peer-memory kernel
constexpr size_t kSignalBytes = 1u << 20;

enum class StagingRegion : int { kFlat = 0, kTree = 1, kLamport = 2, kFp8 = 3, kFp8OneShot = 4 };
enum class SignalRegion : int { kBarrier = 0, kTree = 1, kFp8 = 2, kControl = 3, kWindow = 4 };

/// How ranks trade setup records: every rank calls allGather() with the same tag and gets every
/// rank's value (index = rank). Comms made by cclx go through their store, the NCCL drop-in
/// through the application's NCCL comm. Throws (cclxTimeout naming the missing ranks, or the
/// transport's error) when a rank does not take part.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual std::vector<std::string> allGather(const std::string& tag, const std::string& mine) = 0;
};

struct PeerSetup {
  int rank = 0;
  int size = 1;
  int device = -1;  // this rank's CUDA device (current when peerMemOpen is called)
  Config cfg;       // ddaEnable, ddaStagingBytes
  std::chrono::milliseconds timeout{600000};
};

struct PeerMem {
  bool usable = false;      // false: DDA/FP8 peer kernels must not run (NCCL for everything)
  std::string whyNot;       // reason when !usable (logged at INFO)
  std::string sharing;      // "ranks 0 and 3 share GPU <bus id>" when some ranks share a GPU
  int rank = 0;             // this rank (global rank == index below)
  int size = 1;
  int device = -1;
  size_t stagingBytes = 0;  // per rank
  char* staging[kMaxRanks] = {};   // staging[r]: rank r's staging buffer (r == rank: local)
  char* signal[kMaxRanks] = {};    // signal[r]: rank r's signal area

  /// Byte offset and size of a staging region (identical on all ranks).
  size_t regionOffset(StagingRegion r) const;
  size_t regionBytes(StagingRegion r) const;
  char* region(int peer, StagingRegion r) const { return staging[peer] + regionOffset(r); }
  static size_t signalOffset(SignalRegion r) {
    switch (r) {
      case SignalRegion::kBarrier: return 0;
      case SignalRegion::kTree: return 64u << 10;
      case SignalRegion::kFp8: return 256u << 10;
      case SignalRegion::kControl: return 512u << 10;
      case SignalRegion::kWindow: break;
    }
    return 516u << 10;
  }
  static size_t signalRegionBytes(SignalRegion r) {
    switch (r) {
      case SignalRegion::kBarrier: return 64u << 10;
      case SignalRegion::kTree: return 192u << 10;
      case SignalRegion::kFp8: return 256u << 10;
      case SignalRegion::kControl: return 4u << 10;
      case SignalRegion::kWindow: break;
    }
    return 508u << 10;
  }
  char* signalRegion(int peer, SignalRegion r) const { return signal[peer] + signalOffset(r); }
};

/// Collective over the comm: finds which ranks share a host, a process or a GPU (from host
/// identity, pid and PCI bus id, exchanged first), decides whether peer memory is usable (one
/// host, 2..kMaxRanks ranks, one process per rank, P2P between every pair of distinct GPUs,
/// cfg.ddaEnable), allocates and initializes this rank's buffers, exchanges IPC handles and opens
/// the peers'. Every rank reaches the same verdicts. Must be called with the comm's device
/// current. Throws cclx::Error on CUDA failures.
void peerMemOpen(PeerMem& pm, const PeerSetup& setup, Exchange& ex);
/// Unmaps the peers' buffers and frees this rank's. Safe on a PeerMem that was never opened.
void peerMemClose(PeerMem& pm);

}  // namespace cclx
