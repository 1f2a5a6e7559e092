// CUDA IPC peer memory (see ipc.h).
#include "transport/ipc.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "transport/cuda_check.h"

namespace cclx {

namespace {
// Region r spans [bound(r), bound(r + 1)) (see ipc.h).
size_t regionBound(size_t S, int r) {
  static constexpr size_t kNum[] = {0, 1, 4, 8, 12};  // 22nds of S
  return r >= 5 ? S : (S / 22 * kNum[r] + S % 22 * kNum[r] / 22) & ~size_t(255);
}
}  // namespace

size_t PeerMem::regionOffset(StagingRegion r) const { return regionBound(stagingBytes, int(r)); }

size_t PeerMem::regionBytes(StagingRegion r) const {
  return regionBound(stagingBytes, int(r) + 1) - regionBound(stagingBytes, int(r));
}

namespace {

std::string key(const char* what, int rank) { return strFormat("cclx_ipc_%s_%d", what, rank); }

// Local verdict: can this rank reach every peer's GPU directly? Returns "" if yes, else why not.
std::string checkPeers(const BootstrapInfo& info, int device) {
  auto timeout = info.opts.timeout;
  for (int r = 0; r < info.size; ++r) {
    if (r == info.rank) continue;
    std::string bus = info.store->get(key("bus", r), timeout);
    int d = -1;
    if (cudaDeviceGetByPCIBusId(&d, bus.c_str()) != cudaSuccess) {
      (void)cudaGetLastError();
      return strFormat("rank %d's GPU %s is not visible to rank %d", r, bus.c_str(), info.rank);
    }
    if (d == device) return strFormat("ranks %d and %d share GPU %s", info.rank, r, bus.c_str());
    int can = 0;
    CCLX_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, d));
    if (!can) return strFormat("no P2P access from GPU %d to GPU %d (rank %d)", device, d, r);
  }
  return "";
}

}  // namespace

void peerMemOpen(PeerMem& pm, const BootstrapInfo& info, int device) {
  pm = PeerMem{};
  pm.rank = info.rank;
  pm.size = info.size;
  pm.device = device;
  // Facts every rank sees identically: no exchange needed to agree on them.
  if (!info.cfg.ddaEnable) pm.whyNot = "CCLX_DDA_ENABLE=0";
  else if (info.numHosts != 1) pm.whyNot = strFormat("the comm spans %d hosts", info.numHosts);
  else if (info.size < 2 || info.size > kMaxRanks)
    pm.whyNot = strFormat("world size %d is outside 2..%d", info.size, kMaxRanks);
  if (!pm.whyNot.empty()) {
    CCLX_INFO("peer memory off: %s; NCCL carries every collective", pm.whyNot.c_str());
    return;
  }
  auto timeout = info.opts.timeout;
  char bus[64] = {};
  CCLX_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), device));
  info.store->set(key("bus", info.rank), bus);

  std::string why = checkPeers(info, device);
  size_t staging = (std::max<size_t>(info.cfg.ddaStagingBytes, 1u << 20) + 4095) & ~size_t(4095);
  char* base = nullptr;
  if (why.empty()) {
    cudaError_t e = cudaMalloc(&base, staging + kSignalBytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      why = strFormat("cudaMalloc of %zu bytes failed on rank %d: %s", staging + kSignalBytes,
                      info.rank, cudaGetErrorString(e));
      base = nullptr;
    } else {
      // Before publishing: flags start at 0, LL slots hold no valid epoch, and the Lamport
      // inboxes (DDA and FP8 one-shot) are empty (all ones).
      CCLX_CUDA_CHECK(cudaMemset(base, 0, staging + kSignalBytes));
      PeerMem lay;
      lay.stagingBytes = staging;
      for (StagingRegion r : {StagingRegion::kLamport, StagingRegion::kFp8OneShot})
        CCLX_CUDA_CHECK(cudaMemset(base + lay.regionOffset(r), 0xFF, lay.regionBytes(r)));
      CCLX_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  info.store->set(key("ok", info.rank), why.empty() ? "1" : "0:" + why);
  for (int r = 0; r < info.size && why.empty(); ++r) {
    std::string v = info.store->get(key("ok", r), timeout);
    if (v != "1") why = strFormat("rank %d: %s", r, v.size() > 2 ? v.c_str() + 2 : "unusable");
  }
  if (!why.empty()) {
    if (base) CCLX_CUDA_CHECK(cudaFree(base));
    pm.whyNot = why;
    CCLX_INFO("peer memory off: %s; NCCL carries every collective", why.c_str());
    return;
  }

  pm.stagingBytes = staging;
  cudaIpcMemHandle_t h;
  CCLX_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
  info.store->set(key("handle", info.rank), std::string(reinterpret_cast<char*>(&h), sizeof(h)));
  pm.staging[info.rank] = base;
  pm.signal[info.rank] = base + staging;
  for (int r = 0; r < info.size; ++r) {
    if (r == info.rank) continue;
    std::string v = info.store->get(key("handle", r), timeout);
    CCLX_REQUIRE(v.size() == sizeof(cudaIpcMemHandle_t), cclxRemoteError,
                 "rank %d published a malformed IPC handle (%zu bytes)", r, v.size());
    cudaIpcMemHandle_t ph;
    std::memcpy(&ph, v.data(), sizeof(ph));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, ph, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      peerMemClose(pm);
      CCLX_THROW(cclxCudaError, "cudaIpcOpenMemHandle of rank %d's buffer failed on rank %d: %s", r,
                 info.rank, cudaGetErrorString(e));
    }
    pm.staging[r] = static_cast<char*>(p);
    pm.signal[r] = static_cast<char*>(p) + staging;
  }
  pm.usable = true;
  CCLX_INFO("peer memory on: %d ranks, staging %zu bytes per rank", info.size, staging);
}

void peerMemClose(PeerMem& pm) {
  for (int r = 0; r < pm.size && r < kMaxRanks; ++r) {
    if (!pm.staging[r]) continue;
    cudaError_t e = (r == pm.rank) ? cudaFree(pm.staging[r]) : cudaIpcCloseMemHandle(pm.staging[r]);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      CCLX_WARN("releasing rank %d's peer buffer failed: %s", r, cudaGetErrorString(e));
    }
    pm.staging[r] = nullptr;
    pm.signal[r] = nullptr;
  }
  pm.usable = false;
}

}  // namespace cclx
