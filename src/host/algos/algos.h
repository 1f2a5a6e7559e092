// src/host/algos: the host (shared-memory) algorithms: one collective algorithm per file, each answering "can I
// run these arguments?" and "run them" over the step protocol of host/shm.h. The host backend
// (host/backend.cc) asks core/select/select.h which one a call takes.
#pragma once

#include <memory>

#include "core/comm/backend.h"

namespace cclx {

struct HostCtx;  // host/shm.h: this rank's view of the shared-memory transport

class HostAlgo {
 public:
  virtual ~HostAlgo() = default;
  virtual const char* name() const = 0;
  virtual bool canRun(const CollArgs& args, const HostCtx& ctx) const = 0;
  /// Runs the collective to completion on the calling thread.
  virtual void run(const CollArgs& args, HostCtx& ctx) = 0;
};

std::unique_ptr<HostAlgo> makeHostFlatAllReduce();     // "shm-flat"      flat.cc
std::unique_ptr<HostAlgo> makeHostTreeAllReduce();     // "shm-tree"      tree.cc
std::unique_ptr<HostAlgo> makeHostLamportAllReduce();  // "shm-lamport"   lamport.cc (data as its own flag)
std::unique_ptr<HostAlgo> makeHostReduce();            // "shm-reduce"    tree.cc (its first half)
std::unique_ptr<HostAlgo> makeHostBroadcast();         // "shm-broadcast" broadcast.cc
std::unique_ptr<HostAlgo> makeHostAllGather();         // "shm-allgather" allgather.cc (single and list)
std::unique_ptr<HostAlgo> makeHostReduceScatter();     // "shm-reducescatter" reducescatter.cc
std::unique_ptr<HostAlgo> makeHostReduceScatterV();    // "shm-reducescatterv" reducescatter.cc
std::unique_ptr<HostAlgo> makeHostAllToAll();          // "shm-alltoall"  alltoall.cc
std::unique_ptr<HostAlgo> makeHostAllToAllV();         // "shm-alltoallv" alltoall.cc
std::unique_ptr<HostAlgo> makeHostAllToAllVDevice();   // "shm-alltoallv" alltoall.cc (split sizes in rows)
std::unique_ptr<HostAlgo> makeHostSendRecv();          // "shm-p2p"       sendrecv.cc (Send, Recv, SendRecv)
std::unique_ptr<HostAlgo> makeHostBarrier();           // "shm-barrier"   barrier.cc

// The CPU twins of the FP8 collectives (fp8.cc): the GPU kernels' element rules, bit for bit.
std::unique_ptr<HostAlgo> makeHostFp8AllReduce();         // "fp8" (two-shot)
std::unique_ptr<HostAlgo> makeHostFp8OneShotAllReduce();  // "fp8_oneshot"
std::unique_ptr<HostAlgo> makeHostFp8AllGather();         // "fp8"
std::unique_ptr<HostAlgo> makeHostFp8ReduceScatter();     // "fp8"
std::unique_ptr<HostAlgo> makeHostFp8AllToAll();          // "fp8"

// reduce_scatter_quantized (bf16 stochastic rounding on the wire, f32 sums), the CPU twin of
// src/gpu/quantized (quantized.cc).
std::unique_ptr<HostAlgo> makeHostQuantizedReduceScatter();  // "shm-sr-bf16"

// Fused allreduce + residual add + RMSNorm (+ FP8), the CPU twins of src/gpu/fused (rmsnorm.cc).
std::unique_ptr<HostAlgo> makeHostRmsOneShot();  // "shm-fused-oneshot"
std::unique_ptr<HostAlgo> makeHostRmsTwoShot();  // "shm-fused-twoshot"
/// The local part of the unfused sequence: rows [row0, row0 + rows) of a.rms's outputs from `ar`,
/// the allreduce result of those rows (rows of hidden elements of a.dtype, row0 first).
void hostRmsRows(const CollArgs& a, const void* ar, size_t row0, size_t rows);

}  // namespace cclx
