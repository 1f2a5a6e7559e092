// One-sided windows between the ranks of one host over CUDA IPC (gpu/window/window.h), and the
// choice of a GPU comm's window transport.
//
// Registration exports the allocation that holds the registered buffer (cudaIpcGetMemHandle of
// the allocation's base, found with the driver: a tensor of torch's caching allocator sits at an
// offset inside a larger segment) plus the buffer's offset in it; every peer opens the handle
// (once per process and allocation, reference-counted: two windows may lie in one segment) and
// adds the offset. Memory IPC cannot export (cudaMallocAsync pools, torch's expandable segments)
// is refused on every rank with the reason.
//
// Puts go by copy engine (cudaMemcpyAsync into the peer's mapping) from CCLX_WIN_PUT_CE_MIN_BYTES
// up and by SM stores (kernels.cu) below; hint "put_path" = ce | sm forces either. Signals and
// waits are kernels on the window's signal slot (window.h). Slots are chosen collectively: the
// lowest slot free on every rank. A rank frees a slot only after its own calls on the window
// have completed, so once a slot is free everywhere no signal is in flight into it, and a window
// that takes it over starts its expected values at the counts it finds (launchWinBaseline).
//
// Teardown: deregistration waits for this rank's calls on the window, tells every rank, closes
// its mappings of the peers' buffers, and tells every rank again; only then may a rank free what
// it registered. On a failed comm nothing is closed or freed (kernels may still be running).
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/log.h"
#include "gpu/backend.h"
#include "gpu/runtime.h"
#include "gpu/window/window.h"

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
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* p = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CCLX_THROW(cclxCudaError, "cudaIpcOpenMemHandle failed: %s", cudaGetErrorString(e));
  }
  c.open[handle] = {static_cast<char*>(p), 1};
  return static_cast<char*>(p);
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
// driver's cuMemGetAddressRange, reached through the runtime (libcclx does not link libcuda).
cudaError_t allocationBase(const void* p, char** base) {
  size_t size = 0;
#if defined(CCLX_HAVE_HIP)
  hipDeviceptr_t b = nullptr;
  hipError_t e = hipMemGetAddressRange(&b, &size, const_cast<void*>(p));
  *base = static_cast<char*>(b);
  return e;
#else
  using Fn = int (*)(unsigned long long*, size_t*, unsigned long long);  // CUresult, CUdeviceptr
  static const Fn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return Fn(nullptr);
    }
    return reinterpret_cast<Fn>(f);
  }();
  if (!fn) return cudaErrorNotSupported;
  unsigned long long b = 0;
  if (fn(&b, &size, reinterpret_cast<unsigned long long>(p)) != 0) return cudaErrorInvalidValue;
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

class IpcWindow final : public WinImpl {
 public:
  IpcWindow(CudaBackend& b, int slot)
      : b_(b), sh_(b.shared()), calls_(b, sh_->size), slot_(slot), rank_(sh_->rank),
        size_(sh_->size), peer_(size_t(size_)), handles_(size_t(size_)) {
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
    std::string rec;
    try {
      rec = exportRecord(ptr);
    } catch (const Error& e) {
      rec = std::string("!") + e.what();
    }
    const std::vector<std::string> recs = ex("ipc", rec);
    std::string bad = failures(recs);
    if (!bad.empty()) CCLX_THROW(cclxInvalidArgument, "tensor_register: %s", bad.c_str());
    std::string ok = "1";
    {
      DeviceGuard g(sh_->device);
      for (int r = 0; r < size_ && ok == "1"; ++r) {
        if (r == rank_) continue;
        const std::string& v = recs[size_t(r)];
        const size_t hb = sizeof(cudaIpcMemHandle_t);
        if (v.size() < 2 + hb || v[1 + hb] != ':') {
          ok = strFormat("!rank %d published a malformed record", r);
          break;
        }
        try {
          const std::string h = v.substr(1, hb);
          char* base = ipcOpen(h);
          handles_[size_t(r)] = h;
          peer_[size_t(r)] = base + std::stoull(v.substr(2 + hb));
        } catch (const Error& e) {
          ok = strFormat("!opening rank %d's buffer: %s", r, e.what());
        }
      }
    }
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
    CCLX_ARG_CHECK(path == "auto" || path == "ce" || path == "sm",
                   "put: hint put_path='%s' (use auto, ce or sm)", path.c_str());
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

 private:
  // 'H' + IPC handle of the allocation holding ptr + ':' + ptr's offset in it.
  std::string exportRecord(void* ptr) const {
    DeviceGuard g(sh_->device);
    int dev = -1;
    const gpurt::MemKind kind = gpurt::memKind(ptr, dev);
    CCLX_REQUIRE(kind == gpurt::MemKind::kDevice && dev == sh_->device, cclxInvalidArgument,
                 "the buffer %p is not device memory of the comm's device cuda:%d (CUDA IPC "
                 "exports cudaMalloc memory only)", ptr, sh_->device);
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
                 "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) cannot be shared through "
                 "CUDA IPC; allocate it with cudaMalloc (torch's default caching allocator)",
                 cudaGetErrorString(e));
    }
    return "H" + std::string(reinterpret_cast<const char*>(&h), sizeof(h)) + ":" +
           std::to_string(size_t(static_cast<char*>(ptr) - base));
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
      if (!handles_[size_t(r)].empty()) ipcClose(handles_[size_t(r)]);
      handles_[size_t(r)].clear();
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

  CudaBackend& b_;
  std::shared_ptr<CudaShared> sh_;
  WinCalls calls_;
  int slot_, rank_, size_;
  char* slots_[kMaxRanks] = {};       // every rank's signal slot of this window
  std::vector<char*> peer_;           // every rank's window as addressed here
  std::vector<std::string> handles_;  // the IPC handles opened for them
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
