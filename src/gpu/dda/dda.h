// The direct-access (DDA) algorithms: allreduce flat (flat.cu), Lamport (lamport.cu) and tree
// (tree.cu), the peer barrier (barrier.cu), and the exchange collectives (all-gather,
// reduce-scatter, all-to-all, all-to-all-v) one-shot over LL16 slots (xchg_ll.cu) and pipelined
// through inboxes (xchg_pipe.cu), each a DeviceAlgo (gpu/algo.h). Plain C++: no CUDA headers
// needed by callers.
#pragma once

#include <memory>

#include "gpu/algo.h"

namespace cclx {

/// Element types and ops the DDA allreduce kernels implement (f32/f64/f16/bf16 and 8/32/64-bit
/// integers; every op, bitwise ones for integers only).
bool ddaOpSupported(RedOpKind op, DataType t);

std::unique_ptr<DeviceAlgo> makeDdaFlat();     // "flat": one-shot over LL16 packet slots
std::unique_ptr<DeviceAlgo> makeDdaLamport();  // "lamport": one-shot, the data as its own flag
std::unique_ptr<DeviceAlgo> makeDdaTree();     // "tree": reduce-scatter + all-gather, any size
std::unique_ptr<DeviceAlgo> makeDdaBarrier();  // barrier over the signal areas (1 block)
/// "ll": all-gather, reduce-scatter, all-to-all in one shot over the LL16 slots of the flat
/// allreduce (same counters); messages up to one slot per block and peer.
std::unique_ptr<DeviceAlgo> makeDdaXchgLL();
/// "pipelined": all-gather, reduce-scatter, all-to-all, all-to-all-v, reduce-scatter-v,
/// broadcast, reduce and the collectives lowered onto grouped messages at any size, chunks
/// through double-buffered inboxes with per-pair flags.
std::unique_ptr<DeviceAlgo> makeDdaXchgPipe();
/// "pipelined" for all_to_all_v_device: the pipelined exchange with its plan made on the device
/// from split sizes in device memory (xchg_dev.cu); any size, no host synchronization.
std::unique_ptr<DeviceAlgo> makeDdaXchgDev();
/// all_to_all_v_device at world size 1: a local copy by one kernel that reads the split sizes on
/// the device (capturable; bad sizes fail the call in the error words, output poisoned).
void launchDeviceRowsLocal(const CollArgs& a, const DeviceCtx& ctx, void* stream);

/// Grid sizes (identical on every rank: they define the slot layout).
constexpr int kFlatBlocks = 32;
int ddaTreeBlocks(const DeviceCtx& ctx);
/// Bytes of one LL16 slot [set][src][block] of the kFlat region (dda/ll.cuh).
size_t llSlotBytes(const DeviceCtx& ctx);

/// True when a call of AllGather / ReduceScatter / AllToAll(V) / Broadcast / Reduce (or
/// AllToAllVDevice: the whole buffers, the counts being unknown here) has input and
/// output overlapping in a way the exchange kernels cannot run in place (anything but the in-place
/// conventions: the all-gather input at the own block of the output, the reduce-scatter output at
/// the own block of the input, all-to-all, broadcast and reduce with send == recv): the backend
/// then copies the input to a stream-ordered temporary first. List forms never need it (xchgPlan
/// refuses their overlaps).
bool xchgNeedsStagedInput(const CollArgs& a, int rank, int size);

}  // namespace cclx
