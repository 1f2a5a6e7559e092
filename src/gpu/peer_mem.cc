// Peer memory over CUDA (or HIP) IPC (see peer_mem.h).
#include "gpu/peer_mem.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "gpu/algo.h"
#include "gpu/runtime.h"
#include "store/bootstrap.h"

namespace cclx {

namespace {

// Shares of S (22nds) per StagingRegion, in enum order.
constexpr size_t kShare[kNumStagingRegions] = {1, 3, 4, 4, 7, 3};

// Regions whose inboxes start "empty" as all-ones bytes (the data-as-flag protocols).
bool filledWithOnes(int r) {
  return r == int(StagingRegion::kLamport) || r == int(StagingRegion::kFp8OneShot);
}

// Growth record of region r in a signal area: [0, 8) state, [16, 80) the IPC handle.
constexpr size_t kGrowRecord = 128;
enum : uint64_t { kGrowNone = 0, kGrowPublished = 1, kGrowFailed = 2 };
size_t growOffset(int r) { return PeerMem::signalOffset(SignalRegion::kGrow) + size_t(r) * kGrowRecord; }

}  // namespace

const char* regionName(StagingRegion r) {
  switch (r) {
    case StagingRegion::kFlat: return "flat/LL";
    case StagingRegion::kTree: return "tree";
    case StagingRegion::kLamport: return "lamport";
    case StagingRegion::kFp8: return "fp8";
    case StagingRegion::kFp8OneShot: return "fp8-oneshot";
    case StagingRegion::kXchg: return "exchange";
  }
  return "?";
}

size_t PeerMem::regionBytes(StagingRegion r) const {
  return (stagingBytes / 22 * kShare[int(r)] + stagingBytes % 22 * kShare[int(r)] / 22) & ~size_t(255);
}

size_t PeerMem::allocatedBytes() const {
  size_t n = 0;
  for (int r = 0; r < kNumStagingRegions; ++r)
    if (allocated & (1u << r)) n += regionBytes(StagingRegion(r));
  return n;
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
  char* base = nullptr;
  if (why.empty()) {
    cudaError_t e = gpurt::mallocPeerVisible(&base, kSignalBytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      why = strFormat("allocating %zu bytes of peer memory failed on rank %d: %s", kSignalBytes,
                      s.rank, cudaGetErrorString(e));
      base = nullptr;
    } else {
      // Before publishing: flags start at 0 and no growth record is published.
      CCLX_CUDA_CHECK(cudaMemset(base, 0, kSignalBytes));
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

  pm.stagingBytes = (std::max<size_t>(s.cfg.ddaStagingBytes, 1u << 20) + 4095) & ~size_t(4095);
  cudaIpcMemHandle_t h;
  CCLX_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
  pm.signal[s.rank] = base;
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
      CCLX_THROW(cclxCudaError, "cudaIpcOpenMemHandle of rank %d's signal area failed on rank %d: %s",
                 r, s.rank, cudaGetErrorString(e));
    }
    pm.signal[r] = static_cast<char*>(p);
  }
  pm.usable = true;
  CCLX_INFO("peer memory on: %d ranks, %zu-byte signal area, staging up to %zu bytes per rank "
            "allocated on first use%s",
            s.size, kSignalBytes, pm.stagingBytes,
            pm.sharing.empty() ? "" : " (some ranks share a GPU)");
}

namespace {

// Synchronous host <-> device copies on the growth stream (a non-blocking stream of the comm's
// device: never ordered after the application's work, legal while another stream captures).
void copyOn(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t st) {
  CCLX_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, st));
  CCLX_CUDA_CHECK(cudaStreamSynchronize(st));
}

}  // namespace

bool peerMemGrow(PeerMem& pm, uint32_t want, std::chrono::milliseconds timeout, void* stream,
                 uint32_t* missingOut) {
  want &= ~pm.allocated & ((1u << kNumStagingRegions) - 1);
  if (!pm.usable || want == 0) return true;
  CCLX_REQUIRE(!(want & pm.failed), cclxInternalError, "growth of a failed staging region");
  auto st = static_cast<cudaStream_t>(stream);
  const int me = pm.rank;
  // 1. Allocate, initialize and publish this rank's regions (ascending, as every rank does).
  char* mine[kNumStagingRegions] = {};
  std::string allocError;
  for (int r = 0; r < kNumStagingRegions; ++r) {
    if (!(want & (1u << r))) continue;
    const size_t bytes = pm.regionBytes(StagingRegion(r));
    uint64_t state = kGrowFailed;
    cudaIpcMemHandle_t h{};
    if (bytes > 0 && gpurt::mallocPeerVisible(&mine[r], bytes) == cudaSuccess) {
      CCLX_CUDA_CHECK(cudaMemsetAsync(mine[r], filledWithOnes(r) ? 0xFF : 0, bytes, st));
      CCLX_CUDA_CHECK(cudaStreamSynchronize(st));
      CCLX_CUDA_CHECK(cudaIpcGetMemHandle(&h, mine[r]));
      state = kGrowPublished;
    } else {
      (void)cudaGetLastError();
      mine[r] = nullptr;
      allocError = strFormat("allocating %zu bytes for the %s staging region failed on rank %d", bytes,
                             regionName(StagingRegion(r)), me);
    }
    char* rec = pm.signal[me] + growOffset(r);
    copyOn(rec + 16, &h, sizeof(h), cudaMemcpyHostToDevice, st);  // the handle before the state
    copyOn(rec, &state, sizeof(state), cudaMemcpyHostToDevice, st);
  }
  // 2. Every peer's records: all published (or one failed) before any handle is opened, so that a
  //    failed region is opened by nobody and every rank frees its own copy.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t states[kMaxRanks][kNumStagingRegions] = {};
  for (;;) {
    uint32_t missing = 0;
    for (int p = 0; p < pm.size; ++p) {
      if (p == me) continue;
      for (int r = 0; r < kNumStagingRegions; ++r) {
        if (!(want & (1u << r)) || states[p][r] != kGrowNone) continue;
        copyOn(&states[p][r], pm.signal[p] + growOffset(r), sizeof(uint64_t), cudaMemcpyDeviceToHost, st);
        if (states[p][r] == kGrowNone) missing |= 1u << p;
      }
    }
    if (!missing) break;
    // A rank that failed raised the abort word here (gpu/algo.h kCtl*): stop waiting, and say
    // why as a kernel that finds the word would (gpu/work.cc), the timeout's word first.
    uint32_t ctl[3] = {0, 0, 0};
    copyOn(ctl, pm.signalRegion(me, SignalRegion::kControl), sizeof(ctl), cudaMemcpyDeviceToHost, st);
    if (ctl[kCtlTimeout] != 0 || ctl[kCtlHost] != 0) {
      const uint32_t word = ctl[kCtlTimeout] != 0 ? ctl[kCtlTimeout] : ctl[kCtlHost];
      const int origin = int(word & 0xFFFFu) - 1;
      std::string ranks;
      for (int p = 0; p < pm.size; ++p)
        if (ctl[kCtlMissing] & (1u << p)) ranks += (ranks.empty() ? "" : ", ") + std::to_string(p);
      if ((word >> 16) == kAbortTimeout)
        CCLX_THROW(cclxTimeout,
                   "rank %d: rank %d timed out waiting for rank(s) %s while this rank waited at "
                   "the first call that needs peer staging",
                   me, origin, ranks.empty() ? "?" : ranks.c_str());
      CCLX_THROW(cclxRemoteError,
                 "rank %d: the comm was aborted by rank %d while this rank waited at the first "
                 "call that needs peer staging",
                 me, origin);
    }
    if (std::chrono::steady_clock::now() > deadline) {
      if (missingOut) *missingOut = missing;
      std::string ranks;
      for (int p = 0; p < pm.size; ++p)
        if (missing & (1u << p)) ranks += (ranks.empty() ? "" : ", ") + std::to_string(p);
      CCLX_THROW(cclxTimeout,
                 "rank %d: timed out after %lld ms waiting for rank(s) %s at the first call that "
                 "needs peer staging (a rank is missing, or the ranks called different "
                 "collectives)",
                 me, (long long)timeout.count(), ranks.c_str());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  bool ok = true;
  for (int r = 0; r < kNumStagingRegions; ++r) {
    if (!(want & (1u << r))) continue;
    bool failed = mine[r] == nullptr;
    for (int p = 0; p < pm.size; ++p)
      if (p != me && states[p][r] == kGrowFailed) failed = true;
    if (failed) {
      if (mine[r]) CCLX_CUDA_CHECK(cudaFree(mine[r]));
      pm.failed |= 1u << r;
      ok = false;
      CCLX_WARN("peer staging region %s (%zu bytes) is off: %s", regionName(StagingRegion(r)),
                pm.regionBytes(StagingRegion(r)),
                allocError.empty() ? "an allocation failed on another rank" : allocError.c_str());
      continue;
    }
    pm.regions[r][me] = mine[r];
    for (int p = 0; p < pm.size; ++p) {
      if (p == me) continue;
      cudaIpcMemHandle_t ph;
      copyOn(&ph, pm.signal[p] + growOffset(r) + 16, sizeof(ph), cudaMemcpyDeviceToHost, st);
      void* q = nullptr;
      cudaError_t e = cudaIpcOpenMemHandle(&q, ph, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        CCLX_THROW(cclxCudaError, "cudaIpcOpenMemHandle of rank %d's %s staging failed on rank %d: %s",
                   p, regionName(StagingRegion(r)), me, cudaGetErrorString(e));
      }
      pm.regions[r][p] = static_cast<char*>(q);
    }
    pm.allocated |= 1u << r;
    CCLX_INFO("peer staging region %s on: %zu bytes per rank (%zu bytes held)",
              regionName(StagingRegion(r)), pm.regionBytes(StagingRegion(r)), pm.allocatedBytes());
  }
  return ok;
}

void peerMemClose(PeerMem& pm) {
  auto release = [&](char*& p, int r, const char* what) {
    if (!p) return;
    cudaError_t e = (r == pm.rank) ? cudaFree(p) : cudaIpcCloseMemHandle(p);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      CCLX_WARN("releasing rank %d's %s failed: %s", r, what, cudaGetErrorString(e));
    }
    p = nullptr;
  };
  for (int g = 0; g < kNumStagingRegions; ++g)
    for (int r = 0; r < pm.size && r < kMaxRanks; ++r)
      release(pm.regions[g][r], r, "peer staging");
  for (int r = 0; r < pm.size && r < kMaxRanks; ++r) release(pm.signal[r], r, "signal area");
  pm.allocated = 0;
  pm.usable = false;
}

}  // namespace cclx
