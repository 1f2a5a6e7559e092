// Peer memory over CUDA (or HIP) IPC (see peer_mem.h).
#include "gpu/peer_mem.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/settings_check.h"
#include "gpu/resources.h"
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

size_t PeerMem::regionOffset(StagingRegion r) const { return regionBound(stagingBytes, int(r)); }

size_t PeerMem::regionBytes(StagingRegion r) const {
  return regionBound(stagingBytes, int(r) + 1) - regionBound(stagingBytes, int(r));
}

namespace {

// Who a rank is: host identity, process, GPU, its SM count and the settings every rank must
// share. One record per rank, exchanged first.
struct Who {
  std::string host, pid, bus, settings;
  int smCount = 0;
  bool ok = false;
};

std::string encodeWho(const std::string& bus, int smCount, const std::string& settings) {
  return hostIdentity() + "\n" + std::to_string(::getpid()) + "\n" + bus + "\n" +
         std::to_string(smCount) + "\n" + settings;
}

Who parseWho(const std::string& v) {
  Who w;
  size_t at = 0;
  std::string f[4];
  for (std::string& x : f) {
    const size_t nl = v.find('\n', at);
    if (nl == std::string::npos) return w;
    x = v.substr(at, nl - at);
    at = nl + 1;
  }
  w.host = f[0];
  w.pid = f[1];
  w.bus = f[2];
  w.smCount = std::atoi(f[3].c_str());
  w.settings = v.substr(at);
  w.ok = !w.bus.empty();
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
  pm.smCount = who[0].smCount;
  for (const Who& w : who) pm.smCount = std::min(pm.smCount, w.smCount);
  if (!s.cfg.ddaEnable) {  // the same on every rank: the settings check passed
    pm.whyNot = "CCLX_DDA_ENABLE=0";
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

using gpurt::Deadline;

// This rank's buffer (staging + signal area): allocated, initialized on a stream of its own
// (flags 0, LL slots without a valid epoch, Lamport inboxes empty: all ones) and exported. ""
// when done; otherwise why not (peer memory then goes off on every rank). `leak`: the
// initialization did not finish in time, so the buffer may not be freed.
std::string makeBuffer(const PeerSetup& s, size_t staging, gpures::DeviceMem& buf,
                       cudaIpcMemHandle_t& handle, Deadline deadline, bool& leak) {
  try {
    injectSetupFailure(s.cfg, s.rank, "alloc");
  } catch (const Error& e) {
    return e.what();
  }
  const size_t total = staging + kSignalBytes;
  char* base = nullptr;
  cudaError_t e = gpurt::mallocPeerVisible(&base, total);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return strFormat("allocating %zu bytes of peer memory failed on rank %d: %s", total, s.rank,
                     cudaGetErrorString(e));
  }
  buf.adopt(base, total);
  gpures::Stream st;
  gpures::createStream(st);
  PeerMem lay;
  lay.stagingBytes = staging;
  CCLX_CUDA_CHECK(cudaMemsetAsync(base, 0, total, st.get()));
  for (StagingRegion r : {StagingRegion::kLamport, StagingRegion::kFp8OneShot})
    CCLX_CUDA_CHECK(
        cudaMemsetAsync(base + lay.regionOffset(r), 0xFF, lay.regionBytes(r), st.get()));
  if (!gpurt::waitStream(st.get(), deadline)) {
    leak = true;
    return strFormat("initializing peer memory on rank %d did not finish within the timeout",
                     s.rank);
  }
  CCLX_CUDA_CHECK(cudaIpcGetMemHandle(&handle, base));
  return "";
}

void closePeers(PeerMem& pm) {
  for (int r = 0; r < pm.size && r < kMaxRanks; ++r) {
    if (r == pm.rank || !pm.staging[r]) continue;
    if (cudaIpcCloseMemHandle(pm.staging[r]) != cudaSuccess) (void)cudaGetLastError();
    pm.staging[r] = pm.signal[r] = nullptr;
  }
}

}  // namespace

void peerMemOpen(PeerMem& pm, const PeerSetup& s, SetupSequence& seq) {
  pm = PeerMem{};
  pm.rank = s.rank;
  pm.size = s.size;
  pm.device = s.device;
  if (s.size < 2 || s.size > kMaxRanks) {  // every rank knows the size: nothing to exchange
    pm.whyNot = strFormat("world size %d is outside 2..%d", s.size, kMaxRanks);
    return;
  }
  const Deadline deadline = gpurt::deadlineAfter(s.timeout);

  // 1. Who everyone is, and the settings that must match (before any memory is shared).
  std::vector<Who> who;
  if (auto recs = seq.step("peer/who", [&] {
        injectSetupFailure(s.cfg, s.rank, "who");
        char bus[64] = {};
        CCLX_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), s.device));
        return encodeWho(bus, s.smCount, s.settings);
      })) {
    std::vector<std::string> settings;
    for (int r = 0; r < s.size; ++r) {
      who.push_back(parseWho((*recs)[size_t(r)]));
      settings.push_back(who.back().settings);
      if (!who.back().ok)
        seq.fail(cclxRemoteError, strFormat("rank %d sent a malformed identity record", r));
    }
    const std::string diff = seq.failed() ? "" : compareSettings(settings);
    if (!diff.empty())
      seq.fail(cclxInvalidUsage,
               "the ranks disagree on settings that must be the same on every rank: " + diff);
    if (!seq.failed()) judge(pm, s, who);
  }
  const bool want = !seq.failed() && pm.whyNot.empty();
  if (!pm.sharing.empty()) CCLX_INFO("%s", pm.sharing.c_str());

  // 2. Every rank's buffer, or why it has none.
  const size_t staging = (std::max<size_t>(s.cfg.ddaStagingBytes, 1u << 20) + 4095) & ~size_t(4095);
  gpures::DeviceMem buf;
  bool initPending = false, published = false;
  std::string offWhy;
  const auto handles = seq.step("peer/handle", [&]() -> std::string {
    if (!want) return "-";
    cudaIpcMemHandle_t h;
    std::string why = checkPeers(s, who);
    if (why.empty()) why = makeBuffer(s, staging, buf, h, deadline, initPending);
    if (!why.empty()) return "N" + why;
    published = true;
    return "H" + std::string(reinterpret_cast<const char*>(&h), sizeof(h));
  });
  if (handles && want) {
    for (int r = 0; r < s.size && offWhy.empty(); ++r) {
      const std::string& v = (*handles)[size_t(r)];
      if (!v.empty() && v[0] == 'N') offWhy = strFormat("rank %d: %s", r, v.c_str() + 1);
      else if (v.size() != 1 + sizeof(cudaIpcMemHandle_t) || v[0] != 'H')
        offWhy = strFormat("rank %d published a malformed IPC handle (%zu bytes)", r, v.size());
    }
  }
  if (published) {
    pm.stagingBytes = staging;
    pm.staging[s.rank] = static_cast<char*>(buf.get());
    pm.signal[s.rank] = pm.staging[s.rank] + staging;
  }

  // 3. Every rank opened every peer's buffer: the vote.
  bool votedYes = false;
  const auto votes = seq.step("peer/vote", [&]() -> std::string {
    if (!want || !offWhy.empty()) return "-";  // the same on every rank: all skip the mapping
    for (int r = 0; r < s.size; ++r) {
      if (r == s.rank) continue;
      try {
        injectSetupFailure(s.cfg, s.rank, "open");
      } catch (const Error& e) {
        closePeers(pm);
        return std::string("N") + e.what();
      }
      cudaIpcMemHandle_t ph;
      std::memcpy(&ph, (*handles)[size_t(r)].data() + 1, sizeof(ph));
      void* p = nullptr;
      const cudaError_t e = cudaIpcOpenMemHandle(&p, ph, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        closePeers(pm);
        return strFormat("NcudaIpcOpenMemHandle of rank %d's buffer failed on rank %d: %s", r,
                         s.rank, cudaGetErrorString(e));
      }
      pm.staging[r] = static_cast<char*>(p);
      pm.signal[r] = static_cast<char*>(p) + staging;
    }
    votedYes = true;
    return "Y";
  });
  if (votes && want && offWhy.empty()) {
    for (int r = 0; r < s.size && offWhy.empty(); ++r) {
      const std::string& v = (*votes)[size_t(r)];
      if (v != "Y") offWhy = strFormat("rank %d: %s", r, v.size() > 1 ? v.c_str() + 1 : "no vote");
    }
  }

  if (seq.failed()) {
    pm.whyNot = seq.why();
    if (seq.broken() && published) {
      // Peers may have mapped this buffer (and, after our vote, finished setup): keep it.
      pm.abandoned = true;
      pm.abortPeers = votedYes;
      (void)buf.leak();
      CCLX_WARN("peer memory setup broke on rank %d (%s): its %zu-byte buffer stays allocated%s",
                s.rank, seq.why().c_str(), staging + kSignalBytes,
                votedYes ? "; the comm's abort word is raised on every rank" : "");
      if (!votedYes) closePeers(pm);
      return;
    }
  } else if (want && offWhy.empty()) {
    pm.usable = true;
    (void)buf.leak();  // owned by pm from here on (peerMemClose)
    CCLX_INFO("peer memory on: %d ranks, staging %zu bytes per rank%s", s.size, staging,
              pm.sharing.empty() ? "" : " (some ranks share a GPU)");
    return;
  } else if (!offWhy.empty()) {
    pm.whyNot = offWhy;
  }
  // Off on every rank: nothing was written into any buffer.
  closePeers(pm);
  pm.staging[s.rank] = pm.signal[s.rank] = nullptr;
  pm.stagingBytes = 0;
  if (initPending) (void)buf.leak();  // an initialization still queued may write into it
  CCLX_INFO("peer memory off: %s", pm.whyNot.c_str());
}

void peerMemClose(PeerMem& pm) {
  if (pm.abandoned) {
    const size_t n = peerMemLeak(pm);
    if (n) CCLX_WARN("rank %d: %zu bytes of peer memory left allocated (peers may still map it)",
                     pm.rank, n);
    return;
  }
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

size_t peerMemLeak(PeerMem& pm) {
  const size_t n = pm.rank < kMaxRanks && pm.staging[pm.rank] ? pm.stagingBytes + kSignalBytes : 0;
  for (int r = 0; r < kMaxRanks; ++r) pm.staging[r] = pm.signal[r] = nullptr;
  pm.usable = false;
  return n;
}

}  // namespace cclx
