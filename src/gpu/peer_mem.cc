// Peer memory shared by file descriptor ('V') or CUDA (or HIP) IPC ('H') (see peer_mem.h).
#include "gpu/peer_mem.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "base/error.h"
#include "base/fd_pass.h"
#include "base/log.h"
#include "core/failure/grow_fault.h"
#include "core/settings/settings_check.h"
#include "core/sharing/mps.h"
#include "core/sharing/peer_share.h"
#include "gpu/algo.h"
#include "gpu/peer_share.h"
#include "gpu/resources.h"
#include "gpu/runtime.h"
#include "store/bootstrap.h"

namespace cclx {

namespace {

// Shares of S (22nds) per StagingRegion, in enum order.
constexpr size_t kShare[kNumStagingRegions] = {1, 3, 4, 4, 7, 3, 0};  // kFused: its own size

// Regions whose inboxes start "empty" as all-ones bytes (the data-as-flag protocols).
bool filledWithOnes(int r) {
  return r == int(StagingRegion::kLamport) || r == int(StagingRegion::kFp8OneShot) ||
         r == int(StagingRegion::kFused);
}

// Growth record of region r in a signal area: [0, 8) state, [16, 80) the IPC handle ('H') or
// [16, 24) the region's mapped size ('V').
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
    case StagingRegion::kFused: return "fused";
  }
  return "?";
}

size_t PeerMem::regionBytes(StagingRegion r) const {
  if (r == StagingRegion::kFused) return fusedBytes;
  return (stagingBytes / 22 * kShare[int(r)] + stagingBytes % 22 * kShare[int(r)] / 22) & ~size_t(255);
}

size_t PeerMem::allocatedBytes() const {
  size_t n = 0;
  for (int r = 0; r < kNumStagingRegions; ++r)
    if (allocated & (1u << r)) n += regionBytes(StagingRegion(r));
  return n;
}

namespace {

// Who a rank is: host identity, process, GPU, its SM count and the settings every rank must
// share. One record per rank, exchanged first.
struct Who {
  std::string host, pid, bus, offer, settings;
  int smCount = 0;
  bool ok = false;
};

std::string encodeWho(const std::string& bus, int smCount, const std::string& offer,
                      const std::string& settings) {
  return hostIdentity() + "\n" + std::to_string(::getpid()) + "\n" + bus + "\n" +
         std::to_string(smCount) + "\n" + offer + "\n" + settings;
}

Who parseWho(const std::string& v) {
  Who w;
  size_t at = 0;
  std::string f[5];
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
  w.offer = f[4];
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
  if (!pm.sharing.empty()) {  // this rank's GPU shared under MPS: warn where kernels can starve
    const Who& me = who[size_t(s.rank)];
    int onGpu = 0;
    for (const Who& w : who) onGpu += w.host == me.host && w.bus == me.bus;
    const std::string why = mpsShareProblem(
        me.bus, onGpu, gpurt::mpsEnabled(s.device),
        s.cfg.mpsThreadPercent.empty() ? nullptr : s.cfg.mpsThreadPercent.c_str());
    if (!why.empty()) CCLX_WARN("rank %d: %s", s.rank, why.c_str());
  }
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

// This rank's signal area: allocated (pm.share's way), zeroed on a stream of its own (flags 0, no
// growth record published; staging comes later, peerMemGrow) and exported: *rec is the record to
// publish ("H" + the IPC handle, or "V" + the mapped size, the allocation's descriptor in *fd).
// "" when done; otherwise why not (peer memory then goes off on every rank). `leak`: the
// initialization did not finish in time, so the buffer may not be freed.
std::string makeBuffer(const PeerSetup& s, peershare::OwnedBuf& buf, std::string* rec,
                       OwnedFd* fd,
                       Deadline deadline, bool& leak) {
  try {
    injectSetupFailure(s.cfg, s.rank, "alloc");
  } catch (const Error& e) {
    return e.what();
  }
  const size_t total = kSignalBytes;
  std::string why;
  char* base = peershare::alloc(buf.kind, total, s.device, &why);
  if (!base)
    return strFormat("allocating %zu bytes of peer memory failed on rank %d: %s", total, s.rank,
                     why.c_str());
  buf.p = base;
  gpures::Stream st;
  gpures::createStream(st);
  CCLX_CUDA_CHECK(cudaMemsetAsync(base, 0, total, st.get()));
  if (!gpurt::waitStream(st.get(), deadline)) {
    leak = true;
    return strFormat("initializing peer memory on rank %d did not finish within the timeout",
                     s.rank);
  }
  if (buf.kind == 'V') {
    size_t size = 0;
    fd->fd = peershare::exportFd(base, &size);
    rec->assign(1, 'V');
    rec->append(std::to_string(size));
  } else {
    rec->assign(1, 'H');
    rec->append(peershare::exportIpc(base));
  }
  return "";
}

void closePeers(PeerMem& pm) {
  for (int r = 0; r < pm.size && r < kMaxRanks; ++r) {
    if (r == pm.rank || !pm.signal[r]) continue;
    peershare::unmap(pm.share, pm.signal[r], pm.signalSize[r]);
    pm.signal[r] = nullptr;
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
  // How this rank can share memory (a mailbox bound now when it offers 'V').
  ShareOffer offer;
  offer.whyNot = "CCLX_DDA_ENABLE=0";
  if (s.cfg.ddaEnable) offer = peershare::offer(s.cfg, s.device, &pm.mailbox);

  // 1. Who everyone is, and the settings that must match (before any memory is shared).
  std::vector<Who> who;
  if (auto recs = seq.step("peer/who", [&] {
        injectSetupFailure(s.cfg, s.rank, "who");
        char bus[64] = {};
        CCLX_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof(bus), s.device));
        return encodeWho(bus, s.smCount, encodeShareOffer(offer), s.settings);
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
  if (want) {  // every rank derives the same choice from the same records
    std::vector<ShareOffer> offers;
    for (const Who& w : who) offers.push_back(parseShareOffer(w.offer));
    std::string why;
    pm.share = chooseShare(offers, &why);
    for (int r = 0; r < s.size && pm.share == 'V'; ++r) pm.mailboxes[r] = offers[size_t(r)].mailbox;
    if (pm.share != 'V')
      CCLX_INFO("peer memory shared by legacy CUDA IPC (%s): a rank that dies frees memory its "
                "peers' kernels may still read",
                why.c_str());
  }
  if (pm.share != 'V') pm.mailbox.reset();

  // 2. Every rank's buffer, or why it has none.
  const size_t staging = (std::max<size_t>(s.cfg.ddaStagingBytes, 1u << 20) + 4095) & ~size_t(4095);
  peershare::OwnedBuf buf;
  buf.kind = pm.share;
  OwnedFd myFd;  // 'V': this rank's signal area as a descriptor, until sent
  bool initPending = false, published = false;
  std::string offWhy;
  const auto handles = seq.step("peer/handle", [&]() -> std::string {
    if (!want) return "-";
    std::string rec;
    std::string why = checkPeers(s, who);
    if (why.empty()) why = makeBuffer(s, buf, &rec, &myFd, deadline, initPending);
    if (!why.empty()) return "N" + why;
    published = true;
    return rec;
  });
  if (handles && want) {
    for (int r = 0; r < s.size && offWhy.empty(); ++r) {
      const std::string& v = (*handles)[size_t(r)];
      char* end = nullptr;
      const unsigned long long size = v.size() > 1 ? std::strtoull(v.c_str() + 1, &end, 10) : 0;
      if (!v.empty() && v[0] == 'N') offWhy = strFormat("rank %d: %s", r, v.c_str() + 1);
      else if (pm.share == 'H' && (v.size() != 1 + sizeof(cudaIpcMemHandle_t) || v[0] != 'H'))
        offWhy = strFormat("rank %d published a malformed IPC handle (%zu bytes)", r, v.size());
      else if (pm.share == 'V' && (v[0] != 'V' || size < kSignalBytes || !end || *end))
        offWhy = strFormat("rank %d published a malformed buffer record (%zu bytes)", r, v.size());
      else if (pm.share == 'V')
        pm.signalSize[r] = size_t(size);
    }
  }
  if (published) {
    pm.stagingBytes = staging;
    pm.fusedBytes = (s.cfg.fusedStagingBytes + 4095) & ~size_t(4095);
    pm.signal[s.rank] = buf.p;
  }

  // 3. Every rank opened every peer's buffer: the vote.
  bool votedYes = false;
  const auto votes = seq.step("peer/vote", [&]() -> std::string {
    if (!want || !offWhy.empty()) return "-";  // the same on every rank: all skip the mapping
    std::map<int, std::vector<int>> fds;
    if (pm.share == 'V') {  // every rank sends before any rank may stop at a failure below
      try {
        fds = peershare::passFds(*pm.mailbox, pm.mailboxes, pm.rank, pm.size, {myFd.fd}, deadline);
      } catch (const Error& e) {
        return strFormat("Nrank %d: %s", s.rank, e.what());
      }
    }
    for (int r = 0; r < s.size; ++r) {
      if (r == s.rank) continue;
      try {
        injectSetupFailure(s.cfg, s.rank, "open");
        if (pm.share == 'V') {
          std::vector<int>& got = fds[r];
          CCLX_REQUIRE(got.size() == 1, cclxRemoteError, "rank %d sent %zu descriptors, not 1", r,
                       got.size());
          const int fd = got[0];
          got[0] = -1;
          pm.signal[r] = peershare::importFd(fd, pm.signalSize[r], s.device);
        } else {
          pm.signal[r] = peershare::importIpc((*handles)[size_t(r)].substr(1));
        }
      } catch (const Error& e) {
        peershare::closeFds(fds);
        closePeers(pm);
        return strFormat("Nopening rank %d's buffer failed on rank %d: %s", r, s.rank, e.what());
      }
    }
    peershare::closeFds(fds);
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
                s.rank, seq.why().c_str(), kSignalBytes,
                votedYes ? "; the comm's abort word is raised on every rank" : "");
      if (!votedYes) closePeers(pm);
      return;
    }
  } else if (want && offWhy.empty()) {
    pm.usable = true;
    (void)buf.leak();  // owned by pm from here on (peerMemClose)
    CCLX_INFO("peer memory on: %d ranks, %zu-byte signal area, staging up to %zu bytes per "
              "rank allocated on first use, shared by %s%s",
              s.size, kSignalBytes, staging,
              pm.share == 'V' ? "file descriptor (cuMem)" : "CUDA IPC",
              pm.sharing.empty() ? "" : " (some ranks share a GPU)");
    return;
  } else if (!offWhy.empty()) {
    pm.whyNot = offWhy;
  }
  // Off on every rank: nothing was written into any buffer.
  closePeers(pm);
  pm.signal[s.rank] = nullptr;
  pm.stagingBytes = pm.fusedBytes = 0;
  pm.mailbox.reset();
  if (initPending) (void)buf.leak();  // an initialization still queued may write into it
  CCLX_INFO("peer memory off: %s", pm.whyNot.c_str());
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
                 GrowAbort* abortOut) {
  want &= ~pm.allocated & ((1u << kNumStagingRegions) - 1);
  if (!pm.usable || want == 0) return true;
  CCLX_REQUIRE(!(want & pm.failed), cclxInternalError, "growth of a failed staging region");
  auto st = static_cast<cudaStream_t>(stream);
  const int me = pm.rank;
  // Tests: CCLX_TEST_GROW_FAIL fails this growth here as a failed allocation would
  // (core/failure/grow_fault.h).
  const int growth = ++pm.growths;
  const GrowFault fault = growFaultFromEnv();
  const bool inject = fault.hits(me, growth);
  // 1. Allocate, initialize and publish this rank's regions (ascending, as every rank does).
  char* mine[kNumStagingRegions] = {};
  OwnedFd myFds[kNumStagingRegions];  // 'V': the regions as descriptors, until sent
  std::string allocError;
  for (int r = 0; r < kNumStagingRegions; ++r) {
    if (!(want & (1u << r))) continue;
    const size_t bytes = pm.regionBytes(StagingRegion(r));
    uint64_t state = kGrowFailed;
    char payload[64] = {};  // the IPC handle ('H') or the mapped size ('V')
    std::string why;
    if (inject) {
      mine[r] = nullptr;
      allocError = growFaultMessage(fault, me, growth);
    } else if (bytes > 0 && (mine[r] = peershare::alloc(pm.share, bytes, pm.device, &why))) {
      CCLX_CUDA_CHECK(cudaMemsetAsync(mine[r], filledWithOnes(r) ? 0xFF : 0, bytes, st));
      CCLX_CUDA_CHECK(cudaStreamSynchronize(st));
      if (pm.share == 'V') {
        size_t size = 0;
        myFds[r].fd = peershare::exportFd(mine[r], &size);
        pm.regionSize[r][me] = size;
        const uint64_t v = size;
        std::memcpy(payload, &v, sizeof(v));
      } else {
        const std::string h = peershare::exportIpc(mine[r]);
        std::memcpy(payload, h.data(), std::min(h.size(), sizeof(payload)));
      }
      state = kGrowPublished;
    } else {
      mine[r] = nullptr;
      allocError = strFormat("allocating %zu bytes for the %s staging region failed on rank %d%s%s",
                             bytes, regionName(StagingRegion(r)), me, why.empty() ? "" : ": ",
                             why.c_str());
    }
    char* rec = pm.signal[me] + growOffset(r);
    copyOn(rec + 16, payload, sizeof(payload), cudaMemcpyHostToDevice, st);  // before the state
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
    uint32_t ctl[4] = {0, 0, 0, 0};
    copyOn(ctl, pm.signalRegion(me, SignalRegion::kControl), sizeof(ctl), cudaMemcpyDeviceToHost, st);
    if (ctl[kCtlTimeout] != 0 || ctl[kCtlHost] != 0) {
      const uint32_t word = ctl[kCtlTimeout] != 0 ? ctl[kCtlTimeout] : ctl[kCtlHost];
      const int origin = int(word & 0xFFFFu) - 1;
      if (abortOut)  // passed on as it came: the peers learn the cause, not this relay
        *abortOut = {word, ctl[kCtlMissing], ctl[kCtlTimeout] != 0 ? ctl[kCtlTimeoutMs] : 0u};
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
      if (abortOut)
        *abortOut = {kAbortTimeout << 16 | uint32_t(me + 1), missing,
                     uint32_t(std::min<long long>(timeout.count(), 0xFFFFFFFFll))};
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
  std::vector<int> opened;  // the regions every rank allocated, ascending
  std::vector<int> sendFds;
  for (int r = 0; r < kNumStagingRegions; ++r) {
    if (!(want & (1u << r))) continue;
    bool failed = mine[r] == nullptr;
    for (int p = 0; p < pm.size; ++p)
      if (p != me && states[p][r] == kGrowFailed) failed = true;
    if (failed) {
      peershare::release(pm.share, mine[r]);
      pm.failed |= 1u << r;
      ok = false;
      CCLX_WARN("peer staging region %s (%zu bytes) is off: %s", regionName(StagingRegion(r)),
                pm.regionBytes(StagingRegion(r)),
                allocError.empty() ? "an allocation failed on another rank" : allocError.c_str());
      continue;
    }
    pm.regions[r][me] = mine[r];
    opened.push_back(r);
    if (pm.share == 'V') sendFds.push_back(myFds[r].fd);
  }
  // 3. 'V': one datagram each way between every pair of ranks carries the opened regions'
  //    descriptors, in ascending region order.
  std::map<int, std::vector<int>> fds;
  struct CloseRest {
    std::map<int, std::vector<int>>& fds;
    ~CloseRest() { peershare::closeFds(fds); }
  } closeRest{fds};
  if (pm.share == 'V' && !opened.empty()) {
    fds = peershare::passFds(*pm.mailbox, pm.mailboxes, me, pm.size, sendFds, deadline);
    for (int p = 0; p < pm.size; ++p)
      if (p != me && fds[p].size() != opened.size())
        CCLX_THROW(cclxRemoteError,
                   "rank %d: rank %d sent %zu descriptors for %zu new staging regions", me, p,
                   fds[p].size(), opened.size());
  }
  for (size_t k = 0; k < opened.size(); ++k) {
    const int r = opened[k];
    for (int p = 0; p < pm.size; ++p) {
      if (p == me) continue;
      char payload[64];
      copyOn(payload, pm.signal[p] + growOffset(r) + 16, sizeof(payload), cudaMemcpyDeviceToHost, st);
      try {
        if (pm.share == 'V') {
          uint64_t size = 0;
          std::memcpy(&size, payload, sizeof(size));
          const int fd = fds[p][k];
          fds[p][k] = -1;
          pm.regions[r][p] = peershare::importFd(fd, size_t(size), pm.device);
          pm.regionSize[r][p] = size_t(size);
        } else {
          pm.regions[r][p] = peershare::importIpc(std::string(payload, sizeof(payload)));
        }
      } catch (const Error& e) {
        CCLX_THROW(cclxCudaError, "opening rank %d's %s staging failed on rank %d: %s", p,
                   regionName(StagingRegion(r)), me, e.what());
      }
    }
    pm.allocated |= 1u << r;
    CCLX_INFO("peer staging region %s on: %zu bytes per rank (%zu bytes held)",
              regionName(StagingRegion(r)), pm.regionBytes(StagingRegion(r)), pm.allocatedBytes());
  }
  return ok;
}

void peerMemClose(PeerMem& pm) {
  if (pm.abandoned) {
    const size_t n = peerMemLeak(pm);
    if (n) CCLX_WARN("rank %d: %zu bytes of peer memory left allocated (peers may still map it)",
                     pm.rank, n);
    return;
  }
  auto release = [&](char*& p, int r, size_t size) {
    if (r == pm.rank) peershare::release(pm.share, p);  // failures are logged
    else peershare::unmap(pm.share, p, size);
    p = nullptr;
  };
  for (int g = 0; g < kNumStagingRegions; ++g)
    for (int r = 0; r < pm.size && r < kMaxRanks; ++r)
      release(pm.regions[g][r], r, pm.regionSize[g][r]);
  for (int r = 0; r < pm.size && r < kMaxRanks; ++r) release(pm.signal[r], r, pm.signalSize[r]);
  pm.allocated = 0;
  pm.usable = false;
  pm.mailbox.reset();
}

size_t peerMemLeak(PeerMem& pm) {
  size_t n = pm.rank < kMaxRanks && pm.signal[pm.rank] ? kSignalBytes : 0;
  n += pm.allocatedBytes();
  for (int g = 0; g < kNumStagingRegions; ++g)
    for (int r = 0; r < kMaxRanks; ++r) pm.regions[g][r] = nullptr;
  for (int r = 0; r < kMaxRanks; ++r) pm.signal[r] = nullptr;
  pm.allocated = 0;
  pm.usable = false;
  return n;
}

}  // namespace cclx
