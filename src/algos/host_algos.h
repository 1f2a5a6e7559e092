// Factories of the host (shared-memory) algorithms, one per file. Each runs one collective type
// to completion on the calling thread over the step protocol of transport/shm.h.
#pragma once

#include <memory>

#include "algos/algo.h"

namespace cclx {

std::unique_ptr<HostAlgo> makeHostFlatAllReduce();   // "shm-flat"
std::unique_ptr<HostAlgo> makeHostTreeAllReduce();   // "shm-tree"
std::unique_ptr<HostAlgo> makeHostLamportAllReduce();  // "shm-lamport" (data as its own flag)
std::unique_ptr<HostAlgo> makeHostReduce();          // "shm-reduce"
std::unique_ptr<HostAlgo> makeHostBroadcast();       // "shm-broadcast"
std::unique_ptr<HostAlgo> makeHostAllGather();       // "shm-allgather" (single and list)
std::unique_ptr<HostAlgo> makeHostReduceScatter();   // "shm-reducescatter" (single and list)
std::unique_ptr<HostAlgo> makeHostAllToAll();        // "shm-alltoall"
std::unique_ptr<HostAlgo> makeHostAllToAllV();       // "shm-alltoallv"
std::unique_ptr<HostAlgo> makeHostSendRecv();        // "shm-p2p" (Send and Recv)
std::unique_ptr<HostAlgo> makeHostBarrier();         // "shm-barrier"

}  // namespace cclx
