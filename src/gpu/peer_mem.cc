// Peer memory over CUDA (or HIP) IPC (see peer_mem.h).
#include "gpu/peer_mem.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "gpu/runtime.h"
#include "store/bootstrap.h"

namespace cclx {

namespace {
// Region r spans [bound(r), bound(r + 1)) (see ipc.h).
size_t regionBound(size_t S, int r) {
  static constexpr size_t kNum[] = {0, 1, 4, 8, 12};  // 22nds of S
  return r >= 5 ? S : (S / 22 * kNum[r] + S % 22 * kNum[r] / 22) & ~size_t(255);
}
}  // namespace

size_t PeerMem::regionOffset(StagingRegion r) const {
  return r == StagingRegion::kFused ? stagingBytes : regionBound(stagingBytes, int(r));
}

size_t PeerMem::regionBytes(StagingRegion r) const {
  if (r == StagingRegion::kFused) return fusedBytes;
  return regionBound(stagingBytes, int(r) + 1) - regionBound(stagingBytes, int(r));
}

namespace {

// Who a rank is: host identity, process and GPU. One record per rank, exchanged first.
struct Who {
  std::string host, pid, bus;
};

Who parseWho(const std::string& v) {
  Who w;
  size_t a = v.find('\n'), b = a == std::string::npos ? a : v.find('\n', a + 1);
  if (b == std::string::npos) return w;
  w.host = v.substr(0, a);
  w.pid = v.substr(a + 1, b - a - 1);
  w.bus = v.substr(b + 1);
  return w;
}

// Local verdict: can this rank reach every peer's GPU directly (or share it)? "" if yes.
std::string checkPeers(const PeerSetup& s, const std::vector<Who>& who) {
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    int d = -1;
    if (cudaDeviceGetByPCIBusId(&d, who[size_t(r)].bus.c_str()) != cudaSuccess) {
      (void)cudaGetLastError();
      return strFormat("rank %d's GPU %s is not visible to rank %d", r, who[size_t(r)].bus.c_str(),
                       s.rank);
    }
    if (d == s.device) continue;  // the same GPU: IPC of another process's memory works
    int can = 0;
    CCLX_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, s.device, d));
    if (!can) return strFormat("no P2P access from GPU %d to GPU %d (rank %d)", s.device, d, r);
  }
  return "";
}

// Facts every rank derives identically from the exchanged records.
void judge(PeerMem& pm, const PeerSetup& s, const std::vector<Who>& who) {
  for (int a = 0; a < s.size && pm.sharing.empty(); ++a)
    for (int b = a + 1; b < s.size; ++b)
      if (who[size_t(a)].host == who[size_t(b)].host && who[size_t(a)].bus == who[size_t(b)].bus) {
        pm.sharing = strFormat("ranks %d and %d share GPU %s", a, b, who[size_t(a)].bus.c_str());
        break;
      }
  if (!s.cfg.ddaEnable) {
    pm.whyNot = "CCLX_DDA_ENABLE=0";
    return;
  }
  if (s.size < 2 || s.size > kMaxRanks) {
    pm.whyNot = strFormat("world size %d is outside 2..%d", s.size, kMaxRanks);
    return;
  }
  for (int r = 1; r < s.size; ++r)
    if (who[size_t(r)].host != who[0].host) {
      pm.whyNot = strFormat("ranks 0 and %d are on different hosts", r);
      return;
    }
  for (int a = 0; a < s.size; ++a)
    for (int b = a + 1; b < s.size; ++b)
      if (who[size_t(a)].pid == who[size_t(b)].pid) {
        pm.whyNot = strFormat("ranks %d and %d are one process", a, b);
        return;
      }
}

}  // namespace

void peerMemOpen(PeerMem& pm, const PeerSetup& s, Exchange& ex) {
  pm = PeerMem{};
  pm.rank = s.rank;
  pm.size = s.size;
  pm.device = s.device;
  if (s.size < 2) {
    pm.whyNot = strFormat("world size %d is outside 2..%d", s.size, kMaxRanks);
    return;
  }
  char bus[64] = {};
  CCLX_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), s.device));
  const std::vector<std::string> recs =
      ex.allGather("peer/who", hostIdentity() + "\n" + std::to_string(::getpid()) + "\n" + bus);
  std::vector<Who> who;
  for (const std::string& r : recs) who.push_back(parseWho(r));
  judge(pm, s, who);
  if (!pm.sharing.empty()) CCLX_INFO("%s", pm.sharing.c_str());
  if (!pm.whyNot.empty()) {
    CCLX_INFO("peer memory off: %s", pm.whyNot.c_str());
    return;
  }

  std::string why = checkPeers(s, who);
  size_t staging = (std::max<size_t>(s.cfg.ddaStagingBytes, 1u << 20) + 4095) & ~size_t(4095);
  const size_t fused = (s.cfg.fusedStagingBytes + 4095) & ~size_t(4095);
  const size_t total = staging + fused + kSignalBytes;
  char* base = nullptr;
  if (why.empty()) {
    cudaError_t e = gpurt::mallocPeerVisible(&base, total);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      why = strFormat("allocating %zu bytes of peer memory failed on rank %d: %s", total,
                      s.rank, cudaGetErrorString(e));
      base = nullptr;
    } else {
      // Before publishing: flags start at 0, LL slots hold no valid epoch, and the Lamport
      // inboxes (DDA, FP8 one-shot, fused) are empty (all ones).
      CCLX_CUDA_CHECK(cudaMemset(base, 0, total));
      PeerMem lay;
      lay.stagingBytes = staging;
      lay.fusedBytes = fused;
      for (StagingRegion r : {StagingRegion::kLamport, StagingRegion::kFp8OneShot,
                              StagingRegion::kFused})
        CCLX_CUDA_CHECK(cudaMemset(base + lay.regionOffset(r), 0xFF, lay.regionBytes(r)));
      CCLX_CUDA_CHECK(cudaDeviceSynchronize());
    }
  }
  const std::vector<std::string> oks = ex.allGather("peer/ok", why.empty() ? "1" : "0:" + why);
  for (int r = 0; r < s.size && why.empty(); ++r) {
    const std::string& v = oks[size_t(r)];
    if (v != "1") why = strFormat("rank %d: %s", r, v.size() > 2 ? v.c_str() + 2 : "unusable");
  }
  if (!why.empty()) {
    if (base) CCLX_CUDA_CHECK(cudaFree(base));
    pm.whyNot = why;
    CCLX_INFO("peer memory off: %s", why.c_str());
    return;
  }

  pm.stagingBytes = staging;
  pm.fusedBytes = fused;
  cudaIpcMemHandle_t h;
  CCLX_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
  pm.staging[s.rank] = base;
  pm.signal[s.rank] = base + staging + fused;
  const std::vector<std::string> handles =
      ex.allGather("peer/handle", std::string(reinterpret_cast<char*>(&h), sizeof(h)));
  for (int r = 0; r < s.size; ++r) {
    if (r == s.rank) continue;
    const std::string& v = handles[size_t(r)];
    if (v.size() != sizeof(cudaIpcMemHandle_t)) {
      peerMemClose(pm);
      CCLX_THROW(cclxRemoteError, "rank %d published a malformed IPC handle (%zu bytes)", r, v.size());
    }
    cudaIpcMemHandle_t ph;
    std::memcpy(&ph, v.data(), sizeof(ph));
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, ph, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      peerMemClose(pm);
      CCLX_THROW(cclxCudaError, "cudaIpcOpenMemHandle of rank %d's buffer failed on rank %d: %s", r,
                 s.rank, cudaGetErrorString(e));
    }
    pm.staging[r] = static_cast<char*>(p);
    pm.signal[r] = static_cast<char*>(p) + staging + fused;
  }
  pm.usable = true;
  CCLX_INFO("peer memory on: %d ranks, staging %zu + %zu bytes per rank%s", s.size, staging, fused,
            pm.sharing.empty() ? "" : " (some ranks share a GPU)");
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
