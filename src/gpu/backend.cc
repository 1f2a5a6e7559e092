// The GPU backend (see backend.h): setup in three parts (device, peer memory, algorithms), the
// per-call choice through core/select.h, stream semantics, pointer checks, teardown.
#include "gpu/backend.h"

#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "gpu/runtime.h"
#include "gpu/dda/dda.h"
#include "gpu/fp8/fp8.h"
#include "gpu/fused/fused.h"
#include "gpu/nccl/colls.h"

namespace cclx {

namespace {

bool isBitwise(RedOpKind k) {
  return k == RedOpKind::BAND || k == RedOpKind::BOR || k == RedOpKind::BXOR;
}

// Puts the calling thread in relaxed stream-capture mode for its lifetime (when `on`).
class RelaxedCapture {
 public:
  explicit RelaxedCapture(bool on) : on_(on) {
    if (on_) CCLX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode_));
  }
  ~RelaxedCapture() {
    if (on_) (void)cudaThreadExchangeStreamCaptureMode(&mode_);
  }

 private:
  bool on_;
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace

CudaBackend::CudaBackend(const GpuSetup& setup, Exchange& ex) : cfg_(setup.cfg) {
  plainNccl_ = setup.plainNccl;
  setupDevice(setup);
  setupPeers(setup, ex);
  setupAlgorithms();
}

CudaBackend::~CudaBackend() {
  try {
    finalize();
  } catch (const std::exception& e) {
    CCLX_WARN("GPU backend teardown: %s", e.what());
  }
}

// The device, the internal stream and events, the epoch counters and the error words.
void CudaBackend::setupDevice(const GpuSetup& s) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    CCLX_THROW(cclxUnsupported, "rank %d: no CUDA device available (%s)", s.rank,
               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
  }
  const int dev = s.device >= 0 ? s.device : s.localRank % count;
  CCLX_REQUIRE(dev < count, cclxInvalidUsage, "rank %d: cuda:%d requested but only %d device(s) visible",
               s.rank, dev, count);
  sh_->device = dev;
  sh_->rank = s.rank;
  sh_->size = s.size;
  sh_->name = s.name;
  sh_->timeout = s.timeout;
  CCLX_CUDA_CHECK(cudaSetDevice(dev));
  ctx_.rank = s.rank;
  ctx_.size = s.size;
  ctx_.device = dev;
  ctx_.cfg = s.cfg;
  CCLX_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.smCount, cudaDevAttrMultiProcessorCount, dev));
  ctx_.timerScale = gpurt::timerScale(dev);
  CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&internal_, cudaStreamNonBlocking));
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&forkEv_, cudaEventDisableTiming));
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&orderEv_, cudaEventDisableTiming));
  {  // warm the event pool
    cudaEvent_t evs[8];
    for (auto& ev : evs) ev = sh_->takeEvent();
    for (auto ev : evs) sh_->returnEvent(ev);
  }
  CCLX_CUDA_CHECK(cudaMalloc(&ctx_.counters, kNumCounters * sizeof(uint64_t)));
  CCLX_CUDA_CHECK(cudaMemset(ctx_.counters, 0, kNumCounters * sizeof(uint64_t)));
  CCLX_CUDA_CHECK(cudaMalloc(&scratch_, 16));
  CCLX_CUDA_CHECK(cudaMemset(scratch_, 0, 16));
  uint32_t* eh = nullptr;
  CCLX_CUDA_CHECK(cudaHostAlloc(&eh, kErrorWords * sizeof(uint32_t), cudaHostAllocMapped));
  std::memset(eh, 0, kErrorWords * sizeof(uint32_t));
  sh_->errHost = eh;
  CCLX_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sh_->errDev), eh, 0));
  ctx_.errorFlagDev = sh_->errDev;
  ctx_.errorFlagHost = sh_->errHost;
  CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&sh_->abortStream, cudaStreamNonBlocking));
  CCLX_CUDA_CHECK(cudaHostAlloc(&sh_->abortValue, sizeof(uint32_t), cudaHostAllocDefault));
}

// Peer memory (collective). Ranks that share a GPU keep it, but then no NCCL comm may exist.
void CudaBackend::setupPeers(const GpuSetup& s, Exchange& ex) {
  peerMemOpen(pm_, PeerSetup{s.rank, s.size, sh_->device, s.cfg, s.timeout}, ex);
  ctx_.peer = &pm_;
  if (pm_.usable)
    for (int r = 0; r < s.size && r < kMaxRanks; ++r)
      sh_->ctl[r] = reinterpret_cast<uint32_t*>(pm_.signalRegion(r, SignalRegion::kControl));
  if (!pm_.sharing.empty())
    ncclRefusal_ = pm_.sharing + "; NCCL needs one GPU per rank; the direct-access and FP8 "
                   "collectives run";
}

void CudaBackend::setupAlgorithms() {
  flat_ = makeDdaFlat();
  lamport_ = makeDdaLamport();
  tree_ = makeDdaTree();
  barrier_ = makeDdaBarrier();
  fp8Ar_ = makeFp8AllReduce();
  fp8Os_ = makeFp8OneShotAllReduce();
  fp8Ag_ = makeFp8AllGather();
  fp8Rs_ = makeFp8ReduceScatter();
  fp8A2a_ = makeFp8AllToAll();
  rmsOne_ = makeRmsOneShot();
  rmsTwo_ = makeRmsTwoShot();
  CCLX_INFO("GPU backend '%s': rank %d/%d on cuda:%d (%d SMs), peer memory %s%s", name(),
            ctx_.rank, ctx_.size, sh_->device, ctx_.smCount, pm_.usable ? "on" : "off: ",
            pm_.usable ? "" : pm_.whyNot.c_str());
}

void CudaBackend::attachNccl(nccl::ncclComm_t comm, bool owned) {
  CCLX_REQUIRE(ncclRefusal_.empty(), cclxInternalError, "NCCL comm attached although %s",
               ncclRefusal_.c_str());
  std::lock_guard<std::mutex> g(sh_->mu);
  sh_->comm = comm;
  sh_->ownsComm = owned;
}

Caps CudaBackend::caps(const CollArgs& a) const {
  Caps c;
  c.worldSize = ctx_.size;
  c.nccl = ncclRefusal_.empty();
  c.plainNccl = plainNccl_;
  c.timed = pm_.sharing.empty();
  c.peer = ctx_.peerUsable() && a.count > 0 && ddaOpSupported(a.op.kind, a.dtype);
  c.dataAsFlag = !gpurt::kHip;  // docs/DESIGN.md "AMD (HIP)"
  const bool fp8 = lowPrecisionWanted(a, cfg_);  // FP8 checks only when it may run
  switch (a.type) {
    case CollType::AllReduce:
      c.flat = flat_->canRun(a, ctx_);
      c.lamport = lamport_->canRun(a, ctx_);
      c.tree = tree_->canRun(a, ctx_);
      if (fp8) {
        c.fp8 = fp8Ar_->canRun(a, ctx_);
        c.fp8OneShot = fp8Os_->canRun(a, ctx_);
      }
      break;
    case CollType::AllGather: c.fp8 = fp8 && fp8Ag_->canRun(a, ctx_); break;
    case CollType::ReduceScatter: c.fp8 = fp8 && fp8Rs_->canRun(a, ctx_); break;
    case CollType::AllToAll: c.fp8 = fp8 && fp8A2a_->canRun(a, ctx_); break;
    case CollType::Barrier: c.peerBarrier = barrier_->canRun(a, ctx_); break;
    case CollType::AllReduceRmsNorm:
      c.rmsOneShot = rmsOne_->canRun(a, ctx_);
      c.rmsTwoShot = rmsTwo_->canRun(a, ctx_);
      break;
    default: break;
  }
  return c;
}

Algo CudaBackend::select(const CollArgs& a) const { return cclx::select(a, cfg_, caps(a)); }

DeviceAlgo* CudaBackend::algoFor(const CollArgs& a, Algo algo) const {
  switch (algo) {
    case Algo::Flat: return flat_.get();
    case Algo::Lamport: return lamport_.get();
    case Algo::Tree: return tree_.get();
    case Algo::PeerBarrier: return barrier_.get();
    case Algo::Fp8OneShot: return fp8Os_.get();
    case Algo::RmsOneShot: return rmsOne_.get();
    case Algo::RmsTwoShot: return rmsTwo_.get();
    case Algo::RmsUnfused: break;
    case Algo::Fp8:
      return a.type == CollType::AllReduce       ? fp8Ar_.get()
             : a.type == CollType::AllGather     ? fp8Ag_.get()
             : a.type == CollType::ReduceScatter ? fp8Rs_.get()
                                                 : fp8A2a_.get();
    case Algo::Base: break;
  }
  return nullptr;
}

std::string CudaBackend::selectAllReduce(const CollArgs& a) {
  const Algo algo = select(a);
  if (a.type == CollType::AllReduceRmsNorm && (algo == Algo::Base || algo == Algo::RmsUnfused)) {
    const CollArgs ar = rmsAllReduce(a, nullptr);
    return "unfused(" + (algo == Algo::Base ? std::string("nccl") : selectAllReduce(ar)) + ")";
  }
  return algo == Algo::Base ? "nccl" : algoFor(a, algo)->name();
}

CollArgs CudaBackend::rmsAllReduce(const CollArgs& a, void* recv) {
  CollArgs ar;
  ar.type = CollType::AllReduce;
  ar.send = a.rms.x;
  ar.recv = recv;
  ar.count = a.count;
  ar.dtype = a.dtype;
  ar.op = RedOpKind::SUM;
  ar.opts = a.opts;
  ar.opts.hints["low_precision"] = "off";
  return ar;
}

void CudaBackend::enqueueRmsUnfused(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing) {
  CollArgs ar = rmsAllReduce(a, a.rms.out);
  const Algo inner = algo == Algo::Base ? Algo::Base : select(ar);
  if (inner == Algo::Base) requireNccl(ar);
  void* tmp = nullptr;
  if (!ar.recv) {  // FP8 output only: the allreduce result needs a place
    CCLX_CUDA_CHECK(cudaMallocAsync(&tmp, a.bytes(), s));
    ar.recv = tmp;
  }
  enqueue(ar, inner, s, capturing);
  launchRmsLocal(a, ar.recv, ctx_, s);
  if (tmp) CCLX_CUDA_CHECK(cudaFreeAsync(tmp, s));
}

void CudaBackend::checkPointer(const void* p, const char* what) const {
  if (!p) return;
  int device = -1;
  const gpurt::MemKind kind = gpurt::memKind(p, device);
  if (kind == gpurt::MemKind::kManaged) return;
  if (kind != gpurt::MemKind::kDevice)
    CCLX_THROW(cclxInvalidUsage, "%s buffer %p is host memory, not memory of the comm's device cuda:%d",
               what, p, sh_->device);
  if (device != sh_->device)
    CCLX_THROW(cclxInvalidUsage, "%s buffer %p is on cuda:%d but the comm uses cuda:%d", what, p,
               device, sh_->device);
}

void CudaBackend::checkPointers(const CollArgs& a) const {
  size_t total = a.count;
  if (a.type == CollType::AllToAllV) {
    total = 0;
    for (size_t c : a.sendCounts) total += c;
    for (size_t c : a.recvCounts) total += c;
  }
  if (a.type == CollType::Barrier || total == 0) return;
  if (a.type == CollType::AllReduceRmsNorm) {
    const RmsNormArgs& r = a.rms;
    checkPointer(r.x, "x");
    checkPointer(r.residual, "residual");
    checkPointer(r.residualOut, "residualOut");
    checkPointer(r.weight, "weight");
    checkPointer(r.out, "out");
    checkPointer(r.fp8Out, "fp8Out");
    checkPointer(r.scales, "scales");
    checkPointer(r.staticScale, "static scale");
    return;
  }
  checkPointer(a.send, "send");
  if (a.recv != a.send) checkPointer(a.recv, "recv");
  for (void* p : a.recvList) checkPointer(p, "recv list");
  for (const void* p : a.sendList) checkPointer(p, "send list");
}

// What no algorithm of this comm can run fails here, before anything is enqueued.
void CudaBackend::checkUsable(const CollArgs& a) const {
  if (isBitwise(a.op.kind) && (a.type == CollType::AllReduce || a.type == CollType::Reduce ||
                               a.type == CollType::ReduceScatter)) {
    CCLX_REQUIRE(a.type == CollType::AllReduce, cclxUnsupported,
                 "%s with %s is not supported on CUDA comms (NCCL has no bitwise reductions)",
                 collName(a.type), opName(a.op.kind));
    CCLX_REQUIRE(ctx_.peerUsable() && ddaOpSupported(a.op.kind, a.dtype), cclxUnsupported,
                 "allreduce %s on CUDA needs peer memory (%s) and an integer type",
                 opName(a.op.kind), pm_.whyNot.empty() ? "available" : pm_.whyNot.c_str());
  }
}

void CudaBackend::requireNccl(const CollArgs& a) const {
  if (!sh_->comm)
    CCLX_THROW(cclxUnsupported, "rank %d: %s needs NCCL, which this comm does not have: %s",
               ctx_.rank, collName(a.type),
               ncclRefusal_.empty() ? "NCCL was torn down" : ncclRefusal_.c_str());
}

// Peer-memory kernels of one rank must run in launch order (their slot-reuse arguments rely on
// it): when the stream changes between eager calls, the new stream waits for the last one.
// Inside CUDA-graph capture the caller's stream order is the graph's, and nothing is added.
void CudaBackend::orderPeerKernel(cudaStream_t s, bool capturing) {
  if (!capturing && orderValid_ && orderStream_ != s) CCLX_CUDA_CHECK(cudaStreamWaitEvent(s, orderEv_, 0));
}
void CudaBackend::peerKernelDone(cudaStream_t s, bool capturing) {
  if (capturing) return;
  CCLX_CUDA_CHECK(cudaEventRecord(orderEv_, s));
  orderStream_ = s;
  orderValid_ = true;
}

void CudaBackend::enqueue(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing) {
  if (a.type != CollType::AllToAllV && a.type != CollType::Barrier && a.count == 0) return;
  if (a.type == CollType::AllReduceRmsNorm && (algo == Algo::Base || algo == Algo::RmsUnfused))
    return enqueueRmsUnfused(a, algo, s, capturing);
  if (DeviceAlgo* alg = algoFor(a, algo)) {
    orderPeerKernel(s, capturing);
    alg->launch(a, ctx_, s);
    peerKernelDone(s, capturing);
    return;
  }
  requireNccl(a);
  if (a.type == CollType::Barrier) {  // a 1-element NCCL allreduce
    CollArgs b;
    b.type = CollType::AllReduce;
    b.send = b.recv = scratch_;
    b.count = 1;
    b.dtype = DataType::i32;
    return ncclRunCollective(b, sh_->comm, ctx_.rank, ctx_.size, s);
  }
  ncclRunCollective(a, sh_->comm, ctx_.rank, ctx_.size, s);
}

// Completed NCCL operations give their events back; one that started on the device (its start
// event completed) more than its timeout ago fails the comm.
void CudaBackend::ncclOpsPoll() {
  std::lock_guard<std::mutex> g(opsMu_);
  const auto now = std::chrono::steady_clock::now();
  size_t keep = 0;
  for (size_t i = 0; i < ncclOps_.size(); ++i) {
    NcclOp& op = ncclOps_[i];
    if (cudaEventQuery(op.end.get()) == cudaSuccess) {
      sh_->returnEvent(op.start);
      continue;
    }
    (void)cudaGetLastError();
    if (op.started == std::chrono::steady_clock::time_point{} &&
        cudaEventQuery(op.start) == cudaSuccess)
      op.started = now;
    (void)cudaGetLastError();
    if (op.started != std::chrono::steady_clock::time_point{} && op.timeout < kInfiniteTimeout &&
        now - op.started > op.timeout && !sh_->failed.load()) {
      sh_->requestAbort();
      sh_->abortNccl();
      sh_->fail(cclxTimeout,
                strFormat("rank %d: NCCL %s on comm '%s' (cuda:%d) did not complete within %lld "
                          "ms of starting (a peer never arrived or is stuck); NCCL aborted, the "
                          "comm is unusable",
                          ctx_.rank, collName(op.type), sh_->name.c_str(), sh_->device,
                          (long long)op.timeout.count()));
    }
    ncclOps_[keep++] = op;
  }
  ncclOps_.resize(keep);
}

std::pair<cclxResult_t, std::string> CudaBackend::poll() {
  if (!sh_->failed.load()) {
    auto dev = sh_->deviceError();
    if (dev.first != cclxSuccess) {
      sh_->requestAbort();
      sh_->abortNccl();
      sh_->fail(dev.first, dev.second);
    }
  }
  if (!sh_->failed.load()) {
    DeviceGuard guard(sh_->device);
    ncclOpsPoll();
    nccl::ncclComm_t c = nullptr;
    {
      std::lock_guard<std::mutex> g(sh_->mu);
      if (sh_->ownsComm) c = sh_->comm;
    }
    nccl::ncclResult_t r = nccl::ncclSuccess;
    if (c && ncclLib().commGetAsyncError(c, &r) == nccl::ncclSuccess && r != nccl::ncclSuccess &&
        r != nccl::ncclInProgress) {
      sh_->requestAbort();
      sh_->fail(cclxNcclError, strFormat("rank %d: NCCL reported error %d on comm '%s'",
                                         ctx_.rank, int(r), sh_->name.c_str()));
    }
  }
  if (!sh_->failed.load()) return {cclxSuccess, ""};
  std::lock_guard<std::mutex> g(sh_->mu);
  return {sh_->failCode, sh_->failMsg};
}

void CudaBackend::enqueueSelected(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing) {
  std::lock_guard<std::mutex> lock(runMu_);
  CCLX_REQUIRE(!finalized_, cclxInvalidUsage, "the CUDA communicator was finalized");
  sh_->throwIfFailed();
  sh_->checkDeviceError();
  DeviceGuard guard(sh_->device);
  enqueue(a, algo, s, capturing);
}

std::string CudaBackend::failureMessage() const {
  std::lock_guard<std::mutex> g(sh_->mu);
  return sh_->failMsg;
}

std::shared_ptr<Work> CudaBackend::run(const CollArgs& a) {
  std::lock_guard<std::mutex> lock(runMu_);
  CCLX_REQUIRE(!finalized_, cclxInvalidUsage, "the CUDA communicator was finalized");
  sh_->throwIfFailed();
  sh_->checkDeviceError();
  checkUsable(a);
  const Algo algo = select(a);  // once per call; a bad "algo" hint fails here
  if (algo == Algo::Base) requireNccl(a);
  DeviceGuard guard(sh_->device);
  cudaStream_t user = static_cast<cudaStream_t>(a.opts.stream);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CCLX_CUDA_CHECK(cudaStreamIsCapturing(user, &cs));
  const bool capturing = cs != cudaStreamCaptureStatusNone;
  // Host-only queries (pointer attributes, event creation) are harmless during capture, but a
  // global-mode capture may count them as unsafe: run them with this thread in relaxed mode.
  RelaxedCapture relaxed(capturing);
  checkPointers(a);
  cudaStream_t s = user;
  if (a.opts.async) {
    CCLX_CUDA_CHECK(cudaEventRecord(forkEv_, user));
    CCLX_CUDA_CHECK(cudaStreamWaitEvent(internal_, forkEv_, 0));
    s = internal_;
  }
  // NCCL operations of eager calls are watched (core/watchdog.h): a start event before, the
  // Work's event after.
  cudaEvent_t start = nullptr;
  if (algo == Algo::Base && !capturing && cfg_.watchdog) {
    start = sh_->takeEvent();
    cudaError_t e = cudaEventRecord(start, s);
    if (e != cudaSuccess) {
      sh_->returnEvent(start);
      CCLX_CUDA_CHECK(e);
    }
  }
  try {
    enqueue(a, algo, s, capturing);
  } catch (...) {
    if (start) sh_->returnEvent(start);
    throw;
  }
  if (!a.opts.async && capturing) return completedWork();
  EventRef ev = sh_->takeEventRef(sh_);
  CCLX_CUDA_CHECK(cudaEventRecord(ev.get(), s));
  if (start) {
    std::lock_guard<std::mutex> g(opsMu_);
    ncclOps_.push_back(NcclOp{a.type, start, ev, {}, a.opts.timeout});
  }
  return makeCudaWork(sh_, std::move(ev), capturing, a.opts.timeout);
}

void CudaBackend::finalize() {
  std::lock_guard<std::mutex> lock(runMu_);
  if (finalized_) return;
  finalized_ = true;
  DeviceGuard guard(sh_->device);
  const bool healthy = !sh_->failed.load();
  if (healthy) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) CCLX_WARN("finalize: cudaDeviceSynchronize: %s", cudaGetErrorString(e));
  }
  nccl::ncclComm_t c = nullptr;
  bool owned = true;
  {
    std::lock_guard<std::mutex> g(sh_->mu);
    std::swap(c, sh_->comm);
    owned = sh_->ownsComm;
  }
  if (c && owned) {
    nccl::ncclResult_t r = healthy ? ncclLib().commDestroy(c) : ncclLib().commAbort(c);
    if (r != nccl::ncclSuccess) CCLX_WARN("NCCL comm teardown returned %d", int(r));
  }
  if (!healthy) return;  // kernels may still be spinning: leave device memory alone
  {
    std::lock_guard<std::mutex> g(opsMu_);
    for (const NcclOp& op : ncclOps_) sh_->returnEvent(op.start);
    ncclOps_.clear();
  }
  for (uint32_t*& c : sh_->ctl) c = nullptr;  // requestAbort must not write into freed memory
  peerMemClose(pm_);
  (void)cudaFree(ctx_.counters);
  (void)cudaFree(scratch_);
  (void)cudaEventDestroy(forkEv_);
  (void)cudaEventDestroy(orderEv_);
  (void)cudaStreamDestroy(internal_);
  ctx_.counters = nullptr;
  scratch_ = nullptr;
}

void CudaBackend::abort() {
  sh_->requestAbort();
  sh_->abortNccl();
  sh_->fail(cclxAborted, strFormat("rank %d: comm '%s' was aborted", ctx_.rank, sh_->name.c_str()));
}

cclxResult_t CudaBackend::asyncError() {
  if (sh_->failed.load()) {
    std::lock_guard<std::mutex> g(sh_->mu);
    return sh_->failCode;
  }
  try {
    sh_->checkDeviceError();
  } catch (const Error& e) {
    return e.code();
  }
  nccl::ncclComm_t c = sh_->comm;
  if (!c || !sh_->ownsComm) return cclxSuccess;
  nccl::ncclResult_t r = nccl::ncclSuccess;
  if (ncclLib().commGetAsyncError(c, &r) != nccl::ncclSuccess) return cclxNcclError;
  if (r == nccl::ncclInProgress) return cclxInProgress;
  return r == nccl::ncclSuccess ? cclxSuccess : cclxNcclError;
}

}  // namespace cclx
