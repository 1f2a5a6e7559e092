// The CUDA backend: device and NCCL setup, stream semantics, pointer checks and per-call choice
// between the DDA kernels, the FP8 collectives and NCCL (docs/DESIGN.md, "CUDA backend").
#include <cuda_runtime.h>

#include <cstring>

#include "algos/cuda_backend.h"
#include "algos/dda_kernels.h"
#include "algos/fp8_algos.h"
#include "core/error.h"
#include "core/log.h"
#include "transport/cuda_check.h"
#include "transport/ipc.h"

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

// Built-in thresholds (bytes per rank) by world size; CCLX_DDA_*_MAX_BYTES override them.
size_t flatTable(int n) { return n <= 2 ? (512u << 10) : n <= 4 ? (256u << 10) : (128u << 10); }
// Lamport one-shot: measured on 2 ranks only; larger worlds push (N - 1) x the message per rank and
// use the tree unless CCLX_DDA_LAMPORT_MAX_BYTES says otherwise.
size_t lamportTable(int n) { return n <= 2 ? (16u << 20) : 0; }
size_t treeTable(int n) { return n <= 2 ? (64u << 20) : n <= 4 ? (16u << 20) : (8u << 20); }

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BootstrapInfo& info);
  ~CudaBackend() override {
    try {
      finalize();
    } catch (const std::exception& e) {
      CCLX_WARN("CUDA backend teardown: %s", e.what());
    }
  }
  const char* name() const override { return plainNccl_ ? "nccl" : "cclx"; }
  std::shared_ptr<Work> run(const CollArgs& a) override;
  std::string selectAllReduce(const CollArgs& a) override;
  void finalize() override;
  void abort() override;
  cclxResult_t asyncError() override;

 private:
  void checkPointer(const void* p, const char* what) const;
  void checkPointers(const CollArgs& a) const;
  DeviceAlgo* fp8For(const CollArgs& a);
  void enqueue(const CollArgs& a, cudaStream_t s, bool capturing);
  void orderPeerKernel(cudaStream_t s, bool capturing);
  void peerKernelDone(cudaStream_t s, bool capturing);

  BootstrapInfo info_;
  std::shared_ptr<CudaShared> sh_ = std::make_shared<CudaShared>();
  PeerMem pm_;
  DeviceCtx ctx_;
  bool plainNccl_ = false;
  cudaStream_t internal_ = nullptr;
  cudaEvent_t forkEv_ = nullptr;
  cudaEvent_t orderEv_ = nullptr;   // recorded after the last eager peer-memory kernel
  cudaStream_t orderStream_ = nullptr;
  bool orderValid_ = false;
  int* scratch_ = nullptr;          // 1-element NCCL barrier buffer
  std::unique_ptr<DeviceAlgo> fp8Ar_, fp8Os_, fp8Ag_, fp8Rs_, fp8A2a_;
  std::mutex runMu_;
  bool finalized_ = false;
};

CudaBackend::CudaBackend(const BootstrapInfo& info) : info_(info) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    CCLX_THROW(cclxUnsupported, "rank %d: no CUDA device available (%s)", info.rank,
               e != cudaSuccess ? cudaGetErrorString(e) : "device count is 0");
  }
  int dev = info.device.index >= 0 ? info.device.index : info.localRank % count;
  CCLX_REQUIRE(dev < count, cclxInvalidUsage, "rank %d: cuda:%d requested but only %d device(s) visible",
               info.rank, dev, count);
  plainNccl_ = info.opts.backend == "nccl";
  sh_->device = dev;
  sh_->rank = info.rank;
  sh_->size = info.size;
  CCLX_CUDA_CHECK(cudaSetDevice(dev));
  ctx_.rank = info.rank;
  ctx_.size = info.size;
  ctx_.device = dev;
  ctx_.cfg = info.cfg;
  CCLX_CUDA_CHECK(cudaDeviceGetAttribute(&ctx_.smCount, cudaDevAttrMultiProcessorCount, dev));

  CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&internal_, cudaStreamNonBlocking));
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&forkEv_, cudaEventDisableTiming));
  CCLX_CUDA_CHECK(cudaEventCreateWithFlags(&orderEv_, cudaEventDisableTiming));
  {  // warm the event pool
    cudaEvent_t evs[8];
    for (auto& e : evs) e = sh_->takeEvent();
    for (auto e : evs) sh_->returnEvent(e);
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

  peerMemOpen(pm_, info, dev);
  ctx_.peer = &pm_;

  // NCCL: rank 0's unique id through the store, after every rank has arrived (so that a missing
  // rank is a store timeout naming it, not a hang inside NCCL).
  const NcclLib& L = ncclLib();
  info.store->set(strFormat("cclx_nccl_arrive_%d", info.rank), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < info.size; ++r) keys.push_back(strFormat("cclx_nccl_arrive_%d", r));
  info.store->wait(keys, info.opts.timeout);
  nccl::ncclUniqueId uid;
  if (info.rank == 0) {
    ncclCheck(L.getUniqueId(&uid), "ncclGetUniqueId");
    info.store->set("cclx_nccl_uid", std::string(uid.internal, sizeof(uid.internal)));
  } else {
    std::string v = info.store->get("cclx_nccl_uid", info.opts.timeout);
    CCLX_REQUIRE(v.size() == sizeof(uid.internal), cclxRemoteError, "malformed NCCL unique id");
    std::memcpy(uid.internal, v.data(), sizeof(uid.internal));
  }
  nccl::ncclComm_t comm = nullptr;
  ncclCheck(L.commInitRank(&comm, info.size, uid, info.rank), "ncclCommInitRank");
  sh_->comm = comm;

  fp8Ar_ = makeFp8AllReduce();
  fp8Os_ = makeFp8OneShotAllReduce();
  fp8Ag_ = makeFp8AllGather();
  fp8Rs_ = makeFp8ReduceScatter();
  fp8A2a_ = makeFp8AllToAll();
  CCLX_INFO("CUDA backend '%s': rank %d/%d on cuda:%d (%d SMs), NCCL %d, peer memory %s%s",
            name(), info.rank, info.size, dev, ctx_.smCount, L.version, pm_.usable ? "on" : "off: ",
            pm_.usable ? "" : pm_.whyNot.c_str());
}

void CudaBackend::checkPointer(const void* p, const char* what) const {
  if (!p) return;
  cudaPointerAttributes at{};
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) (void)cudaGetLastError();
  if (e == cudaSuccess && at.type == cudaMemoryTypeManaged) return;
  if (e != cudaSuccess || at.type != cudaMemoryTypeDevice)
    CCLX_THROW(cclxInvalidUsage, "%s buffer %p is host memory, not memory of the comm's device cuda:%d",
               what, p, sh_->device);
  if (at.device != sh_->device)
    CCLX_THROW(cclxInvalidUsage, "%s buffer %p is on cuda:%d but the comm uses cuda:%d", what, p,
               at.device, sh_->device);
}

void CudaBackend::checkPointers(const CollArgs& a) const {
  size_t total = a.count;
  if (a.type == CollType::AllToAllV) {
    total = 0;
    for (size_t c : a.sendCounts) total += c;
    for (size_t c : a.recvCounts) total += c;
  }
  if (a.type == CollType::Barrier || total == 0) return;
  checkPointer(a.send, "send");
  if (a.recv != a.send) checkPointer(a.recv, "recv");
  for (void* p : a.recvList) checkPointer(p, "recv list");
  for (const void* p : a.sendList) checkPointer(p, "send list");
}

std::string CudaBackend::selectAllReduce(const CollArgs& a) {
  std::string want = info_.cfg.allreduceAlgo;
  if (auto it = a.opts.hints.find("algo"); it != a.opts.hints.end()) want = it->second;
  CCLX_ARG_CHECK(want == "auto" || want == "flat" || want == "lamport" || want == "tree" ||
                     want == "nccl",
                 "allreduce algorithm '%s' is not one of auto|flat|lamport|tree|nccl", want.c_str());
  const bool bitwise = isBitwise(a.op.kind);
  if (!bitwise && !plainNccl_ && fp8Ar_ && lowPrecisionWanted(a, info_.cfg)) {
    // A one-shot call that does not fit the one-shot inboxes runs two-shot.
    if (fp8OneShotWanted(a, info_.cfg, ctx_.size) && fp8Os_->canRun(a, ctx_))
      return "fp8_oneshot";
    if (fp8Ar_->canRun(a, ctx_)) return "fp8";
  }
  const bool dda = ctx_.peerUsable() && a.count > 0 && ddaOpSupported(a.op.kind, a.dtype) &&
                   (!plainNccl_ || bitwise);
  if (!dda) return "nccl";
  const size_t bytes = a.bytes();
  const bool flatOk = ddaFlatFits(bytes, ctx_);
  const size_t flatMax = info_.cfg.ddaFlatMaxBytes ? info_.cfg.ddaFlatMaxBytes : flatTable(ctx_.size);
  const size_t treeMax = info_.cfg.ddaTreeMaxBytes ? info_.cfg.ddaTreeMaxBytes : treeTable(ctx_.size);
  const bool lamportOk = ddaLamportFits(bytes, a.dtype, ctx_);
  const size_t lamportMax =
      info_.cfg.ddaLamportMaxBytes ? info_.cfg.ddaLamportMaxBytes : lamportTable(ctx_.size);
  if (want == "flat") return flatOk ? "flat" : "tree";
  if (want == "lamport") return lamportOk ? "lamport" : "tree";
  if (want == "tree") return "tree";
  if (want == "nccl" && !bitwise) return "nccl";
  if (bytes <= flatMax && flatOk) return "flat";
  if (bytes <= lamportMax && lamportOk) return "lamport";
  if (bytes <= treeMax || bitwise) return "tree";
  return "nccl";
}

DeviceAlgo* CudaBackend::fp8For(const CollArgs& a) {
  if (plainNccl_ || !lowPrecisionWanted(a, info_.cfg)) return nullptr;
  DeviceAlgo* alg = a.type == CollType::AllGather       ? fp8Ag_.get()
                    : a.type == CollType::ReduceScatter ? fp8Rs_.get()
                    : a.type == CollType::AllToAll      ? fp8A2a_.get()
                                                        : nullptr;
  return alg && alg->canRun(a, ctx_) ? alg : nullptr;
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

void CudaBackend::enqueue(const CollArgs& a, cudaStream_t s, bool capturing) {
  DdaArgs d;
  d.send = a.send;
  d.recv = a.recv;
  d.count = a.count;
  d.dtype = a.dtype;
  d.op = a.op;
  d.timeoutNs = timeoutNs(a);
  if (a.type == CollType::Barrier) {
    if (ctx_.peerUsable() && !plainNccl_) {
      orderPeerKernel(s, capturing);
      ddaBarrierLaunch(ctx_, d.timeoutNs, s);
      peerKernelDone(s, capturing);
    } else {
      CollArgs b;
      b.type = CollType::AllReduce;
      b.send = b.recv = scratch_;
      b.count = 1;
      b.dtype = DataType::i32;
      ncclRunCollective(b, *sh_, s);
    }
    return;
  }
  if (a.type != CollType::AllToAllV && a.count == 0) return;
  if (a.type == CollType::AllReduce) {
    std::string algo = selectAllReduce(a);
    if (algo == "nccl") return ncclRunCollective(a, *sh_, s);
    orderPeerKernel(s, capturing);
    if (algo == "flat") ddaFlatLaunch(d, ctx_, s);
    else if (algo == "lamport") ddaLamportLaunch(d, ctx_, s);
    else if (algo == "tree") ddaTreeLaunch(d, ctx_, s);
    else if (algo == "fp8_oneshot") fp8Os_->launch(a, ctx_, s);
    else fp8Ar_->launch(a, ctx_, s);
    peerKernelDone(s, capturing);
    return;
  }
  if (DeviceAlgo* alg = fp8For(a)) {
    orderPeerKernel(s, capturing);
    alg->launch(a, ctx_, s);
    peerKernelDone(s, capturing);
    return;
  }
  ncclRunCollective(a, *sh_, s);
}

std::shared_ptr<Work> CudaBackend::run(const CollArgs& a) {
  std::lock_guard<std::mutex> lock(runMu_);
  CCLX_REQUIRE(!finalized_, cclxInvalidUsage, "the CUDA communicator was finalized");
  sh_->throwIfFailed();
  sh_->checkDeviceError();
  if (isBitwise(a.op.kind) && (a.type == CollType::AllReduce || a.type == CollType::Reduce ||
                               a.type == CollType::ReduceScatter)) {
    CCLX_REQUIRE(a.type == CollType::AllReduce, cclxUnsupported,
                 "%s with %s is not supported on CUDA comms (NCCL has no bitwise reductions)",
                 collName(a.type), opName(a.op.kind));
    CCLX_REQUIRE(ctx_.peerUsable() && ddaOpSupported(a.op.kind, a.dtype), cclxUnsupported,
                 "allreduce %s on CUDA needs peer memory (%s) and an integer type",
                 opName(a.op.kind), pm_.whyNot.empty() ? "available" : pm_.whyNot.c_str());
  }
  if (a.type == CollType::AllReduce) (void)selectAllReduce(a);  // rejects a bad "algo" hint early
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
  enqueue(a, s, capturing);
  if (!a.opts.async && capturing) return completedWork();
  cudaEvent_t ev = sh_->takeEvent();
  cudaError_t e = cudaEventRecord(ev, s);
  if (e != cudaSuccess) {
    sh_->returnEvent(ev);
    CCLX_CUDA_CHECK(e);
  }
  return makeCudaWork(sh_, ev, capturing, a.opts.timeout);
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
  {
    std::lock_guard<std::mutex> g(sh_->mu);
    std::swap(c, sh_->comm);
  }
  if (c) {
    nccl::ncclResult_t r = healthy ? ncclLib().commDestroy(c) : ncclLib().commAbort(c);
    if (r != nccl::ncclSuccess) CCLX_WARN("NCCL comm teardown returned %d", int(r));
  }
  if (!healthy) return;  // kernels may still be spinning: leave device memory alone
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
  sh_->abortNccl();
  sh_->fail(cclxAborted, strFormat("rank %d: the communicator was aborted", info_.rank));
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
  if (!c) return cclxSuccess;
  nccl::ncclResult_t r = nccl::ncclSuccess;
  if (ncclLib().commGetAsyncError(c, &r) != nccl::ncclSuccess) return cclxNcclError;
  if (r == nccl::ncclInProgress) return cclxInProgress;
  return r == nccl::ncclSuccess ? cclxSuccess : cclxNcclError;
}

}  // namespace

std::unique_ptr<Backend> makeCudaBackend(const BootstrapInfo& info) {
  return std::make_unique<CudaBackend>(info);
}

}  // namespace cclx
