// The MoE engine of CUDA comms (core/moe/engine.h): this rank's buffer memory (cudaMalloc, so a
// window exports it with CUDA IPC), the kernels' parameters, and each call's launch in the comm's
// order of peer kernels (so teardown waits for them like for every peer kernel). Also the
// backend's two MoE entry points: why it cannot run the kernels (the route table's input,
// core/moe/route.cc) and the engine itself.
#include <algorithm>
#include <cstring>
#include <functional>

#include "base/error.h"
#include "base/log.h"
#include "core/moe/engine.h"
#include "core/moe/tables.h"
#include "gpu/backend.h"
#include "gpu/runtime.h"
#include "gpu/moe/moe.h"

namespace cclx {
namespace {

/// Blocks of a launch: `want` when set (MoeConfig::maxBlocks, else CCLX_MOE_MAX_BLOCKS), else
/// enough warps for one dispatch piece each (B * xParts), a few received slots each and one
/// combine piece each (B * yParts: a decode batch's rows in pieces); at most one block per SM
/// (co-resident on a GPU of its own) and kGridCap.
int gridFor(const moe::Layout& l, int want, int smCount) {
  if (want <= 0)
    want = std::max({(l.B * l.xParts + moegpu::kWarps - 1) / moegpu::kWarps,
                     int((l.slots() + 2 * moegpu::kWarps - 1) / (2 * moegpu::kWarps)),
                     (l.B * l.yParts + moegpu::kWarps - 1) / moegpu::kWarps});
  int g = std::min(want, moe::kGridCap);
  if (smCount > 0) g = std::min(g, smCount);
  return std::max(g, 1);
}

/// The dispatch kernel's shared memory at most on this build.
size_t smemCap() {
#if defined(CCLX_HAVE_HIP)
  return 48u << 10;
#else
  return moegpu::kMaxSmem;
#endif
}

class CudaMoe final : public MoeEngine {
 public:
  CudaMoe(CudaBackend& b, const moe::Layout& lay, const MoeConfig& cfg)
      : b_(b), sh_(b.shared()), lay_(lay), device_(b.device()) {
    DeviceGuard g(device_);
    const Config& env = b.deviceCtx().cfg;
    chunk_ = moe::chunkFor(lay, cfg.chunkTokens > 0 ? cfg.chunkTokens : env.moeChunkTokens,
                           smemCap());
    if (chunk_ <= 0)  // moeRefusal said so first
      CCLX_THROW(cclxUnsupported, "cclx.moe.Buffer: the dispatch kernel's tables do not fit");
    smem_ = moe::tableBytes(lay, chunk_);
    moegpu::prepareDispatch(lay, smem_);
    grid_ = gridFor(lay, cfg.maxBlocks > 0 ? cfg.maxBlocks : env.moeMaxBlocks,
                    b.deviceCtx().smCount);
    void* p = nullptr;
    CCLX_CUDA_CHECK(cudaMalloc(&p, lay.total));
    base_ = static_cast<char*>(p);
    const cudaError_t e = cudaMemset(base_, 0, lay.total);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      (void)cudaFree(base_);
      CCLX_THROW(cclxCudaError, "cclx.moe.Buffer: cudaMemset: %s", cudaGetErrorString(e));
    }
    CCLX_CUDA_CHECK(cudaDeviceSynchronize());
  }
  ~CudaMoe() override = default;

  MoeRoute route() const override { return MoeRoute::Kernels; }
  void* base() const override { return base_; }
  int blocks() const override { return grid_; }
  int chunkTokens() const override { return chunk_; }

  void attach(char* const* peers) override {
    proto_ = moegpu::Params{};
    for (int r = 0; r < lay_.N; ++r) proto_.peer[r] = peers[r];
    proto_.lay = lay_;
  }

  void dispatch(const MoeCall& c) override {
    moegpu::Params p = params(c, 0);
    p.x = static_cast<const char*>(c.x);
    p.ids = c.ids;
    p.ids64 = c.ids64 ? 1 : 0;
    p.w = c.w;
    p.cached = c.cached ? 1 : 0;
    p.phase = c.phase;
    p.chunk = chunk_;
    launch(c, [&](cudaStream_t s) { moegpu::launchDispatch(p, grid_, smem_, s); });
  }

  void combine(const MoeCall& c) override {
    moegpu::Params p = params(c, 1);
    p.eout = static_cast<const char*>(c.eout);
    p.eoutRows = c.eoutRows;
    p.out = static_cast<char*>(c.out);
    launch(c, [&](cudaStream_t s) { moegpu::launchCombine(p, grid_, s); });
  }

  void release(bool healthy) override {
    if (!base_) return;
    if (healthy) {
      DeviceGuard g(device_);
      // The window's deregistration waited for every rank: no peer maps it; the device's work
      // on it is the caller's to have completed (as with cudaFree, which waits for it).
      const cudaError_t e = cudaFree(base_);
      if (e != cudaSuccess) {
        (void)cudaGetLastError();
        CCLX_WARN("cclx.moe.Buffer: cudaFree: %s", cudaGetErrorString(e));
      }
    } else {
      CCLX_INFO("cclx.moe.Buffer: %zu bytes of device memory left allocated (peers may map it)",
                lay_.total);
    }
    base_ = nullptr;
  }

 private:
  moegpu::Params params(const MoeCall& c, int kind) {
    sh_->throwIfFailed();
    sh_->checkDeviceError();  // a kernel's failure fails the comm before anything is enqueued
    moegpu::Params p = proto_;
    CollArgs a;
    a.opts.timeout = c.timeout;
    p.fail = failParams(a, b_.deviceCtx());
    if (lay_.N == 1) p.fail.ctl[0] = reinterpret_cast<uint32_t*>(base_ + lay_.ctl);
    p.counters = reinterpret_cast<uint64_t*>(base_ + lay_.counters) + size_t(kind) * moe::kGridCap;
    p.tokens = c.tokens;
    return p;
  }

  template <class F>
  void launch(const MoeCall& c, F&& f) {
    DeviceGuard g(device_);
    b_.launchPeerKernel(static_cast<cudaStream_t>(c.stream), f);
  }

  CudaBackend& b_;
  std::shared_ptr<CudaShared> sh_;
  moe::Layout lay_;
  int device_ = -1;
  size_t smem_ = 0;
  int chunk_ = 0;
  int grid_ = 1;
  char* base_ = nullptr;
  moegpu::Params proto_{};
};

}  // namespace

std::string CudaBackend::moeRefusal(const moe::Layout& lay) const {
  if (lay.N > kMaxRanks)
    return strFormat("%d ranks: the kernels map at most %d ranks' memory", lay.N, kMaxRanks);
  if (lay.N > 1 && !pm_.usable)
    return "peer memory is off on this communicator (" +
           (pm_.whyNot.empty() ? std::string("ranks on several hosts or without P2P")
                               : pm_.whyNot) +
           ")";
  if (moe::chunkFor(lay, 0, smemCap()) <= 0)
    return strFormat("the dispatch kernel's routing tables need %zu bytes of shared memory for "
                     "32 tokens (at most %zu): fewer experts",
                     moe::tableBytes(lay, 32), smemCap());
  return "";
}

std::unique_ptr<MoeEngine> CudaBackend::newMoe(const moe::Layout& lay, const MoeConfig& cfg) {
  return std::make_unique<CudaMoe>(*this, lay, cfg);
}

void CudaBackend::launchPeerKernel(cudaStream_t s, const std::function<void(cudaStream_t)>& f) {
  std::lock_guard<std::mutex> g(runMu_);
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CCLX_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  const bool capturing = st != cudaStreamCaptureStatusNone;
  orderPeerKernel(s, capturing);
  f(s);
  peerKernelDone(s, capturing);
}

}  // namespace cclx
