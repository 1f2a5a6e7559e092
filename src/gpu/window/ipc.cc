// One-sided windows between the ranks of one host over CUDA IPC (gpu/window/window.h), and the
// choice of a GPU comm's window transport.
//
// Registration exports the allocation that holds the registered buffer plus the buffer's offset
// in it (a tensor of torch's caching allocator sits at an offset inside a larger segment), in a
// record every rank publishes through the store, together with the address of an FdMailbox of
// its own and its network namespace (base/fd_pass.h):
//  * 'H' record: memory of cudaMalloc: the CUDA IPC handle of the allocation's base (found with
//    the driver); every peer opens it.
//  * 'V' record: memory of CUDA's virtual memory management API (cuMemCreate + cuMemMap:
//    cclx::memAlloc, ncclMemAlloc, torch's MemPool over them), which CUDA IPC refuses: the
//    allocation's key, size and the offset (vmm.h). Once the records are in, every 'V' rank sends
//    the allocation's POSIX file descriptor to every other rank's mailbox (a datagram without one
//    where sending it failed, so nobody waits for nothing) and closes its own; every
//    rank receives one datagram from each other 'V' rank (the comm's timeout; a missing rank is
//    named) and imports and maps each allocation. Unix sockets do not cross network namespaces:
//    where the ranks' differ and some rank publishes 'V', every rank refuses at once.
// Peers map an allocation once per process (reference-counted caches: two windows may lie in one
// segment) and add the offset. Memory that neither path exports (cudaMallocAsync pools, torch's
// expandable segments, cuMem memory without POSIX file-descriptor export) is refused on every rank
// with the reason; so is a failure to open or map a peer's memory on any rank ("opened" exchange).
//
// Puts go by copy engine (cudaMemcpyAsync into the peer's mapping) from CCLX_WIN_PUT_CE_MIN_BYTES
// up and by SM stores (kernels.cu) below; hint "put_path" = ce | sm forces either. Signals and
// waits are kernels on the window's signal slot (window.h). Slots are chosen collectively: the
// lowest slot free on every rank. A rank frees a slot only after its own calls on the window
// have completed, so once a slot is free everywhere no signal is in flight into it, and a window
// that takes it over starts its expected values at the counts it finds (launchWinBaseline).
//
// Teardown: deregistration waits for this rank's calls on the window, tells every rank, closes
// its mappings of the peers' buffers (IPC handles closed, imported cuMem allocations unmapped and
// their address ranges freed, once their last window here lets go), and tells every rank again;
// only then may a rank free what it registered. On a failed comm nothing is closed or freed
// (kernels may still be running).
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>

#include <cclx/device_window.h>

#include "base/error.h"
#include "base/log.h"
#include "core/settings/table.h"
#include "gpu/backend.h"
#include "gpu/driver.h"
#include "gpu/peer_share.h"
#include "gpu/runtime.h"
#include "gpu/window/vmm.h"
#include "gpu/window/window.h"
#include "base/fd_pass.h"

namespace cclx {

namespace {

// Opened IPC handles of this process, by handle bytes: CUDA maps an allocation once per process.
struct IpcCache {
  std::mutex mu;
  std::map<std::string, std::pair<char*, int>> open;  // handle -> (base, references)
};
IpcCache& ipcCache() {
  static auto* c = new IpcCache();
  return *c;
}

char* ipcOpen(const std::string& handle) {
  IpcCache& c = ipcCache();
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.open.find(handle);
  if (it != c.open.end()) {
    ++it->second.second;
    return it->second.first;
  }
  char* p = peershare::importIpc(handle);
  c.open[handle] = {p, 1};
  return p;
}

void ipcClose(const std::string& handle) {
  IpcCache& c = ipcCache();
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.open.find(handle);
  if (it == c.open.end() || --it->second.second > 0) return;
  cudaError_t e = cudaIpcCloseMemHandle(it->second.first);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CCLX_WARN("cudaIpcCloseMemHandle: %s", cudaGetErrorString(e));
  }
  c.open.erase(it);
}

// The allocation that device pointer p lies in (its base): what CUDA IPC exports. CUDA: the
// driver's cuMemGetAddressRange (gpu/driver.h).
cudaError_t allocationBase(const void* p, char** base) {
  size_t size = 0;
#if defined(CCLX_HAVE_HIP)
  hipDeviceptr_t b = nullptr;
  hipError_t e = hipMemGetAddressRange(&b, &size, const_cast<void*>(p));
  *base = static_cast<char*>(b);
  return e;
#else
  const CuDriver& d = cuDriver();
  if (!d.addressRange) return cudaErrorNotSupported;
  CUdeviceptr b = 0;
  if (d.addressRange(&b, &size, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
    return cudaErrorInvalidValue;
  *base = reinterpret_cast<char*>(b);
  return cudaSuccess;
#endif
}

// "rank 1: ...; rank 3: ..." for the records that start with '!'.
std::string failures(const std::vector<std::string>& recs) {
  std::string bad;
  for (size_t r = 0; r < recs.size(); ++r)
    if (recs[r].empty() || recs[r][0] == '!')
      bad += strFormat("%srank %zu: %s", bad.empty() ? "" : "; ", r,
                       recs[r].empty() ? "?" : recs[r].c_str() + 1);
  return bad;
}

// One rank's published record, parsed (see the top of the file).
struct Record {
  char kind = 0;        // 'H' or 'V'
  std::string handle;   // H: the IPC handle's bytes; V: the allocation's key
  size_t size = 0;      // V: the allocation's size
  size_t offset = 0;    // the buffer's offset in the allocation
  std::string netns;    // the rank's network namespace ("": unknown)
  std::string mailbox;  // the rank's FdMailbox address
};

bool parseSize(const std::string& s, size_t* v) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *v);
  return !s.empty() && ec == std::errc() && p == end;
}

// 'H' + handle bytes + ':' + offset + ':' + netns + ':' + mailbox, or
// 'V' + key + ':' + size + ':' + offset + ':' + netns + ':' + mailbox (no ':' inside a field
// but the handle bytes).
bool parseRecord(const std::string& v, Record* out) {
  std::vector<std::string> f;
  const size_t hb = sizeof(cudaIpcMemHandle_t);
  size_t from = 1;
  if (v.empty()) return false;
  out->kind = v[0];
  if (out->kind == 'H') {
    if (v.size() < 2 + hb || v[1 + hb] != ':') return false;
    out->handle = v.substr(1, hb);
    from = 2 + hb;
  } else if (out->kind != 'V') {
    return false;
  }
  for (size_t p = from;;) {
    const size_t q = v.find(':', p);
    f.push_back(v.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (f.size() < 2 || f.back().empty()) return false;
  out->mailbox = f.back();
  out->netns = f[f.size() - 2];
  if (out->kind == 'H') return f.size() == 3 && parseSize(f[0], &out->offset);
  if (f.size() != 5 || f[0].empty() || !parseSize(f[1], &out->size) ||
      !parseSize(f[2], &out->offset) || out->offset >= out->size)
    return false;
  out->handle = f[0];
  return true;
}

class IpcWindow final : public WinImpl {
 public:
  IpcWindow(CudaBackend& b, int slot)
      : b_(b), sh_(b.shared()), calls_(b, sh_->size), slot_(slot), rank_(sh_->rank),
        size_(sh_->size), peer_(size_t(size_)), maps_(size_t(size_)) {
    const PeerMem& pm = *b.deviceCtx().peer;
    for (int r = 0; r < size_; ++r)
      slots_[r] = pm.signalRegion(r, SignalRegion::kWindow) + size_t(slot) * kWinSlotBytes;
    DeviceGuard g(sh_->device);
    launchWinBaseline(slots_[rank_], size_, calls_.internalStream());
    CCLX_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(calls_.internalStream())));
  }

  ~IpcWindow() override {
    try {
      release();
      if (!sh_->failed.load()) {
        calls_.drain();
        b_.returnWindowSlot(slot_);  // this rank's calls on the slot are complete
      }
    } catch (const std::exception& e) {
      CCLX_WARN("window teardown: %s", e.what());
    }
  }

  const char* transport() const override { return "ipc"; }

  void attach(void* ptr, size_t bytes, const WinExchange& ex) override {
    std::unique_ptr<FdMailbox> box;
    OwnedFd mine;  // this rank's allocation as a descriptor ('V' record)
    std::string rec;
    try {
      box = std::make_unique<FdMailbox>();
      rec = exportRecord(ptr, bytes, networkNamespaceId() + ":" + box->address(), &mine.fd);
    } catch (const Error& e) {
      rec = std::string("!") + e.what();
    }
    const std::vector<std::string> recs = ex("ipc", rec);
    std::string bad = failures(recs);
    if (!bad.empty()) CCLX_THROW(cclxInvalidArgument, "tensor_register: %s", bad.c_str());
    // Every rank parses the same records: every rank reaches this verdict.
    std::vector<Record> peers(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      if (!parseRecord(recs[size_t(r)], &peers[size_t(r)]))
        CCLX_THROW(cclxInvalidArgument, "tensor_register: rank %d published a malformed record",
                   r);
    checkNamespaces(peers);

    // Descriptors of the 'V' ranks' allocations.
    std::string ok = "1";
    std::map<int, int> fds;
    std::vector<int> from;
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && peers[size_t(r)].kind == 'V') from.push_back(r);
    if (peers[size_t(rank_)].kind == 'V') {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        try {
          box->send(peers[size_t(r)].mailbox, mine.fd, rank_);
        } catch (const Error& e) {
          if (ok == "1") ok = strFormat("!sending this rank's buffer to rank %d: %s", r, e.what());
          try {
            box->send(peers[size_t(r)].mailbox, -1, rank_);  // rank r is not left waiting
          } catch (const Error&) {
          }
        }
      }
    }
    mine.reset();  // the peers hold their own copies
    if (!from.empty()) {
      try {
        fds = box->receive(from, sh_->timeout.count() > 0 ? sh_->timeout : kInfiniteTimeout);
      } catch (const Error& e) {
        if (ok == "1") ok = strFormat("!receiving the peers' buffers: %s", e.what());
      }
    }
    box.reset();

    if (ok == "1") {
      DeviceGuard g(sh_->device);
      for (int r = 0; r < size_ && ok == "1"; ++r) {
        if (r == rank_) continue;
        const Record& p = peers[size_t(r)];
        try {
          if (p.kind == 'H') {
            char* base = ipcOpen(p.handle);
            maps_[size_t(r)] = {'H', p.handle};
            peer_[size_t(r)] = base + p.offset;
            continue;
          }
          auto it = fds.find(r);
          if (it == fds.end() || it->second < 0) {
            ok = strFormat("!rank %d sent no file descriptor for its buffer", r);
            break;
          }
          const int fd = it->second;
          fds.erase(it);
          char* base = vmmOpen(p.handle, fd, p.size, sh_->device);
          maps_[size_t(r)] = {'V', p.handle};
          peer_[size_t(r)] = base + p.offset;
        } catch (const Error& e) {
          ok = strFormat("!opening rank %d's buffer: %s", r, e.what());
        }
      }
    }
    for (auto& [r, fd] : fds)
      if (fd >= 0) close(fd);
    bad = failures(ex("opened", ok));
    if (!bad.empty()) {
      closePeers();
      CCLX_THROW(cclxCudaError, "tensor_register: %s", bad.c_str());
    }
    peer_[size_t(rank_)] = static_cast<char*>(ptr);
    mine_ = static_cast<char*>(ptr);
    bytes_ = bytes;
  }

  void detach(const WinExchange& ex, bool healthy) override {
    if (!healthy) {
      release();
      return;
    }
    if (!sh_->failed.load()) calls_.drain();
    ex("done", "1");  // no rank writes into any window any more
    release();
    ex("closed", "1");  // no rank maps any other's buffer any more
  }

  void release() override {
    if (!sh_->failed.load()) {
      calls_.drain();
      closePeers();
    }
    std::fill(peer_.begin(), peer_.end(), nullptr);
    mine_ = nullptr;
    bytes_ = 0;
  }

  std::shared_ptr<Work> put(const void* src, size_t bytes, int dst, size_t offset,
                            const CollOptions& o) override {
    const std::string path = hint(o, "put_path", "auto");
    settings::checkHint("put_path", path);  // names the valid values (core/settings/table.cc)
    WinCalls::Call c = calls_.begin(o);
    checkSource(src);
    char* d = peer_[size_t(dst)] + offset;
    const bool ce = path == "ce" || (path == "auto" && bytes >= b_.deviceCtx().cfg.winPutCeMinBytes);
    if (ce) {
      CCLX_CUDA_CHECK(cudaMemcpyAsync(d, src, bytes, cudaMemcpyDeviceToDevice,
                                      static_cast<cudaStream_t>(c.stream)));
    } else {
      const size_t per = 512 * 16 * 2;  // bytes a block moves per pass
      size_t blocks = (bytes + per - 1) / per;
      const size_t cap = size_t(std::max(1, std::min(64, b_.deviceCtx().smCount)));
      blocks = std::max<size_t>(1, std::min(blocks, cap));
      launchWinPut(WinPutParams{fail(o), static_cast<const char*>(src), d, bytes}, int(blocks),
                   c.stream);
    }
    calls_.putDone(c, dst);
    return calls_.finish(c, o);
  }

  std::shared_ptr<Work> signal(int dst, const CollOptions& o) override {
    WinCalls::Call c = calls_.begin(o);
    calls_.orderAfterPuts(c, dst);
    uint64_t* count = reinterpret_cast<uint64_t*>(slots_[dst] + size_t(rank_) * kWinCountStride);
    launchWinSignal(WinSignalParams{fail(o), count}, c.stream);
    return calls_.finish(c, o);
  }

  std::shared_ptr<Work> waitSignal(int src, const CollOptions& o) override {
    WinCalls::Call c = calls_.begin(o);
    calls_.orderAfterWaits(c, src);
    char* s = slots_[rank_];
    WinWaitParams p{fail(o), reinterpret_cast<const uint64_t*>(s + size_t(src) * kWinCountStride),
                    reinterpret_cast<uint64_t*>(s + kWinWaitedOffset + size_t(src) * 8), mine_,
                    bytes_, src};
    launchWinWait(p, c.stream);
    calls_.waitDone(c, src);
    return calls_.finish(c, o);
  }

  void* peerPtr(int rank) const override { return peer_[size_t(rank)]; }

  // Device windows (devwin.cc): resources in cudaMalloc memory, the comm's failure words.
  void* devResAlloc(size_t bytes) override {
    return devWinAllocZeroed(sh_->device, bytes, calls_.internalStream());
  }
  void devResFree(void* p) override { devWinFree(sh_->device, p); }
  void devQuiesce() override {
    calls_.drain();
    devWinQuiesce(sh_->device);
  }
  void devFailWords(DeviceWindowComm& c, std::chrono::milliseconds timeout) const override {
    CollOptions o;
    o.timeout = timeout;
    const FailParams f = fail(o);
    for (int r = 0; r < kMaxRanks; ++r) c.ctl[r] = f.ctl[r];
    c.err = f.err;
    c.timeoutNs = f.timeoutNs;
    c.timeoutMs = f.timeoutMs;
  }
  void* devHandlePlace(const DeviceWindowHandle& h) override {
    return devWinPlace(sh_->device, h, calls_.internalStream());
  }
  void devHandleFree(void* p) override { devWinFree(sh_->device, p); }
  void devAbandon(void* mem, void* handle) override {  // a kernel or a peer may still use them
    CCLX_INFO("device window released without deregistration: its resources %p and handle %p "
              "stay allocated", mem, handle);
  }

 private:
  // Where some rank publishes 'V', every rank must reach every other's mailbox: the same network
  // namespace everywhere (where known). The same verdict on every rank: the same records.
  static void checkNamespaces(const std::vector<Record>& recs) {
    std::string vRanks, seen;
    std::map<std::string, std::string> ranksOf;  // namespace -> "0, 2"
    for (size_t r = 0; r < recs.size(); ++r) {
      if (recs[r].kind == 'V') vRanks += strFormat("%s%zu", vRanks.empty() ? "" : ", ", r);
      if (recs[r].netns.empty()) continue;
      std::string& l = ranksOf[recs[r].netns];
      l += strFormat("%s%zu", l.empty() ? "" : ", ", r);
    }
    if (vRanks.empty() || ranksOf.size() < 2) return;
    for (const auto& [ns, ranks] : ranksOf)
      seen += strFormat("%srank(s) %s: %s", seen.empty() ? "" : "; ", ranks.c_str(), ns.c_str());
    CCLX_THROW(cclxInvalidArgument,
               "tensor_register: rank(s) %s registered cuMem memory, which goes to the peers as a "
               "file descriptor over unix sockets, but the ranks run in different network "
               "namespaces (%s), which such sockets do not cross: run the ranks in one network "
               "namespace or register cudaMalloc memory",
               vRanks.c_str(), seen.c_str());
  }

  // This rank's record (see parseRecord): `tail` is netns + ':' + mailbox. For a 'V' record *fd
  // is the allocation's descriptor (the caller closes it, also when this throws).
  std::string exportRecord(void* ptr, size_t bytes, const std::string& tail, int* fd) const {
    DeviceGuard g(sh_->device);
    int dev = -1;
    const gpurt::MemKind kind = gpurt::memKind(ptr, dev);
    CCLX_REQUIRE(kind == gpurt::MemKind::kDevice && dev == sh_->device, cclxInvalidArgument,
                 "the buffer %p is not device memory of the comm's device cuda:%d (windows "
                 "export cudaMalloc memory and cuMem allocations only)", ptr, sh_->device);
    VmmExport x;
    if (vmmExport(ptr, &x)) {
      *fd = x.fd;
      CCLX_REQUIRE(bytes <= x.size - x.offset, cclxInvalidArgument,
                   "the buffer %p (%zu bytes) runs past the end of the cuMem allocation that "
                   "holds it (%zu bytes from %p): a window's buffer must lie in one allocation "
                   "(torch's expandable segments map several side by side)",
                   ptr, bytes, x.size, static_cast<void*>(x.base));
      return "V" + x.key + ":" + std::to_string(x.size) + ":" + std::to_string(x.offset) + ":" +
             tail;
    }
    char* base = nullptr;
    cudaError_t e = allocationBase(ptr, &base);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      CCLX_THROW(cclxInvalidArgument, "cannot find the allocation of buffer %p: %s", ptr,
                 cudaGetErrorString(e));
    }
    cudaIpcMemHandle_t h;
    e = cudaIpcGetMemHandle(&h, base);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      CCLX_THROW(cclxInvalidArgument,
                 "cudaIpcGetMemHandle failed for the allocation holding the buffer (%s): memory "
                 "from cudaMallocAsync pools or torch's expandable segments "
                 "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) cannot be shared unless it "
                 "was made exportable as a POSIX file descriptor; allocate it with cudaMalloc "
                 "(torch's default caching allocator) or as exportable cuMem memory "
                 "(cclx::memAlloc, torch.cuda.MemPool(cclx.get_mem_allocator()), ncclMemAlloc)",
                 cudaGetErrorString(e));
    }
    return "H" + std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + ":" +
           std::to_string(size_t(static_cast<char*>(ptr) - base)) + ":" + tail;
  }

  void checkSource(const void* src) const {
    int dev = -1;
    const gpurt::MemKind kind = gpurt::memKind(src, dev);
    if (kind == gpurt::MemKind::kManaged) return;
    CCLX_REQUIRE(kind == gpurt::MemKind::kDevice && dev == sh_->device, cclxInvalidUsage,
                 "put: the source %p is not memory of the comm's device cuda:%d", src, sh_->device);
  }

  void closePeers() {
    DeviceGuard g(sh_->device);
    for (int r = 0; r < size_; ++r) {
      PeerMapping& m = maps_[size_t(r)];
      if (m.kind == 'H') ipcClose(m.key);
      if (m.kind == 'V') vmmRelease(m.key, sh_->device);
      m = PeerMapping{};
      if (r != rank_) peer_[size_t(r)] = nullptr;
    }
  }

  FailParams fail(const CollOptions& o) const {
    CollArgs a;
    a.opts.timeout = o.timeout;
    return failParams(a, b_.deviceCtx());
  }

  static std::string hint(const CollOptions& o, const char* key, const char* dflt) {
    auto it = o.hints.find(key);
    return it == o.hints.end() ? dflt : it->second;
  }

  // What this process opened for a peer's window.
  struct PeerMapping {
    char kind = 0;    // 'H': an IPC handle opened (ipcOpen), 'V': an allocation mapped (vmmOpen)
    std::string key;  // the handle's bytes / the allocation's key
  };

  CudaBackend& b_;
  std::shared_ptr<CudaShared> sh_;
  WinCalls calls_;
  int slot_, rank_, size_;
  char* slots_[kMaxRanks] = {};    // every rank's signal slot of this window
  std::vector<char*> peer_;        // every rank's window as addressed here
  std::vector<PeerMapping> maps_;  // what was opened for them
  char* mine_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace

std::unique_ptr<WinImpl> makeIpcWindow(CudaBackend& b, int slot) {
  return std::make_unique<IpcWindow>(b, slot);
}

int CudaBackend::takeWindowSlot(const WinExchange& ex) {
  const size_t cap = PeerMem::signalRegionBytes(SignalRegion::kWindow) / kWinSlotBytes;
  std::string mine(cap, '0');
  {
    std::lock_guard<std::mutex> g(winMu_);
    winSlotUsed_.resize(cap, 0);
    for (size_t i = 0; i < cap; ++i) mine[i] = winSlotUsed_[i] ? '1' : '0';
  }
  const std::vector<std::string> all = ex("slots", mine);
  for (size_t i = 0; i < cap; ++i) {
    bool free = true;
    for (const std::string& v : all) free = free && v.size() == cap && v[i] == '0';
    if (!free) continue;
    std::lock_guard<std::mutex> g(winMu_);
    winSlotUsed_[i] = 1;
    return int(i);
  }
  return -1;
}

void CudaBackend::returnWindowSlot(int slot) {
  std::lock_guard<std::mutex> g(winMu_);
  if (slot >= 0 && size_t(slot) < winSlotUsed_.size()) winSlotUsed_[size_t(slot)] = 0;
}

std::unique_ptr<WinImpl> CudaBackend::newWindow(const WinExchange& ex) {
  CCLX_REQUIRE(!finalized_, cclxInvalidUsage, "the CUDA communicator was finalized");
  sh_->throwIfFailed();
  if (!pm_.usable) return makeNcclWindow(*this, pm_.whyNot);
  const int slot = takeWindowSlot(ex);
  CCLX_REQUIRE(slot >= 0, cclxInvalidUsage,
               "new_window: comm '%s' has %zu live windows, the most it can have; destroy some",
               sh_->name.c_str(), PeerMem::signalRegionBytes(SignalRegion::kWindow) / kWinSlotBytes);
  try {
    return makeIpcWindow(*this, slot);
  } catch (...) {
    returnWindowSlot(slot);
    throw;
  }
}

}  // namespace cclx
