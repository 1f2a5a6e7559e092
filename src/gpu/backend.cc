// The GPU backend (see backend.h): setup in three parts (device, peer memory, algorithms), the
// per-call choice through core/select/select.h, stream semantics, pointer checks, teardown.
#include "gpu/backend.h"

#include <cstring>
#include <memory>
#include <optional>

#include "base/error.h"
#include "base/log.h"
#include "core/elements/outputs.h"
#include "core/select/call_plan.h"
#include "core/settings/settings_check.h"
#include "gpu/runtime.h"
#include "gpu/dda/dda.h"
#include "gpu/fused/fused.h"
#include "gpu/nccl/colls.h"
#include "gpu/quantized/quantized.h"

namespace cclx {

namespace {

// A call that fails before its kernel is enqueued (a staging growth that timed out or was
// aborted) leaves its outputs all-ones, as a kernel that stops does (docs/design/failure.md),
// in the order of the call's stream. Not inside capture: the capture is the caller's to
// discard.
void poisonOutputs(const CollArgs& a, int size, bool capturing) {
  if (capturing) return;
  auto s = static_cast<cudaStream_t>(a.opts.stream);
  for (const auto& [p, n] : outputSpans(a, size)) {
    const cudaError_t e = cudaMemsetAsync(p, 0xFF, n, s);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      CCLX_WARN("poisoning the output of a failed %s: %s", collLabel(a), cudaGetErrorString(e));
      return;
    }
  }
}

}  // namespace

// Every rank runs the whole sequence (core/failure/setup_sequence.h): a rank whose device setup failed
// still takes part in the peer-memory exchanges, sending its error, so that every rank throws.
CudaBackend::CudaBackend(const GpuSetup& setup, Exchange& ex) : cfg_(setup.cfg) {
  plainNccl_ = setup.plainNccl;
  SetupSequence seq(ex, setup.rank, setup.size);
  try {
    injectSetupFailure(setup.cfg, setup.rank, "device");
    setupDevice(setup);
  } catch (const Error& e) {
    seq.fail(e.code(), strFormat("rank %d: %s", setup.rank, e.what()));
  } catch (const std::exception& e) {
    seq.fail(cclxInternalError, strFormat("rank %d: %s", setup.rank, e.what()));
  }
  setupPeers(setup, seq);
  if (seq.failed()) {
    // Members free what they own; peer memory a peer may have mapped stays (gpu/peer_mem.h).
    if (pm_.abandoned) leakAll("setup failed");
    finalized_ = true;
    throw seq.error();
  }
  setupAlgorithms();
  if (!ncclRefusal_.empty() && pm_.usable) growForPointToPoint(setup.timeout);
}

// The abort word of a failed growth on every rank: this rank's timeout, or the cause a peer's
// word carried (GrowAbort); a plain host abort when there is none.
void CudaBackend::raiseGrowAbort(const GrowAbort& ga) {
  if (ga.word) sh_->raiseAbortWord({ga.word, ga.missing, ga.timeoutMs});
  else sh_->requestAbort();
}

// Ranks that share a GPU run point to point on the pipelined exchange (no NCCL). Its staging is
// allocated here, with every rank, rather than at the first batch: growth is collective, and a
// batch involves its own peers only. A rank whose allocation fails turns the region off on every
// rank (batches then fail, naming why); one that never arrives fails the comm's creation.
void CudaBackend::growForPointToPoint(std::chrono::milliseconds timeout) {
  GrowAbort ga;
  try {
    if (!peerMemGrow(pm_, regionBit(StagingRegion::kXchg), timeout, growStream_.get(), &ga))
      CCLX_WARN("rank %d: comm '%s': the pipelined exchange's staging could not be allocated on "
                "every rank: point to point and the exchange collectives are unavailable",
                ctx_.rank, sh_->name.c_str());
  } catch (const Error&) {
    // As a failed growth at a call (growStaging): the peers learn it from the abort word, and
    // nothing a peer may have mapped is freed.
    raiseGrowAbort(ga);
    leakAll("setup failed");
    finalized_ = true;
    throw;
  }
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
  gpures::createStream(internal_);
  gpures::createStream(growStream_);
  gpures::createEvent(forkEv_);
  gpures::createEvent(orderEv_);
  gpures::createEvent(captureEv_);
  for (int i = 0; i < 8; ++i) sh_->returnEvent(sh_->takeEvent());  // warm the event pool
  gpures::allocDevice(counters_, kNumCounters * sizeof(uint64_t));
  gpures::allocDevice(scratch_, 16);
  ctx_.counters = static_cast<uint64_t*>(counters_.get());
  // Zeroed on the internal stream (a memset on the legacy stream would wait for the whole
  // device), done before the backend exists.
  CCLX_CUDA_CHECK(cudaMemsetAsync(counters_.get(), 0, counters_.bytes(), internal_.get()));
  CCLX_CUDA_CHECK(cudaMemsetAsync(scratch_.get(), 0, scratch_.bytes(), internal_.get()));
  if (!gpurt::waitStream(internal_.get(), gpurt::deadlineAfter(s.timeout))) {
    (void)counters_.leak();  // the memsets are still queued
    (void)scratch_.leak();
    CCLX_THROW(cclxTimeout, "initializing the comm's device state on cuda:%d did not finish "
               "within %lld ms", dev, (long long)s.timeout.count());
  }
  uint32_t* eh = nullptr;
  CCLX_CUDA_CHECK(cudaHostAlloc(&eh, kErrorWords * sizeof(uint32_t), cudaHostAllocMapped));
  std::memset(eh, 0, kErrorWords * sizeof(uint32_t));
  sh_->errHost = eh;
  CCLX_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&sh_->errDev), eh, 0));
  ctx_.errorFlagDev = sh_->errDev;
  ctx_.errorFlagHost = sh_->errHost;
  CCLX_CUDA_CHECK(cudaStreamCreateWithFlags(&sh_->abortStream, cudaStreamNonBlocking));
  CCLX_CUDA_CHECK(cudaHostAlloc(&sh_->abortValue, (CudaShared::kWaitRead + kMaxRanks) * sizeof(uint32_t),
                                cudaHostAllocDefault));
}

// Peer memory (collective, gpu/peer_mem.h; never throws). Ranks that share a GPU keep it, but
// then no NCCL comm may exist.
void CudaBackend::setupPeers(const GpuSetup& s, SetupSequence& seq) {
  PeerSetup ps;
  ps.rank = s.rank;
  ps.size = s.size;
  ps.device = sh_->device;
  ps.cfg = s.cfg;
  ps.timeout = s.timeout;
  ps.settings = encodeSettings(
      layoutSettings(s.cfg, s.dropin ? SettingsScope::kDropin : SettingsScope::kGpu));
  ps.smCount = ctx_.smCount;
  peerMemOpen(pm_, ps, seq);
  ctx_.peer = &pm_;
  if (pm_.usable || pm_.abortPeers) {
    std::lock_guard<std::mutex> g(sh_->ctlMu);
    for (int r = 0; r < s.size && r < kMaxRanks; ++r)
      sh_->ctl[r] = reinterpret_cast<uint32_t*>(pm_.signalRegion(r, SignalRegion::kControl));
  }
  if (pm_.usable) ctx_.smCount = pm_.smCount;  // grids that index shared slots: the same on all
  // This rank gave up after voting for peer memory: peers that finished setup fail their first
  // peer kernel (at entry) instead of waiting for this rank.
  if (pm_.abortPeers) sh_->requestAbort();
  if (!pm_.sharing.empty())
    ncclRefusal_ = pm_.sharing + "; NCCL needs one GPU per rank; the direct-access and FP8 "
                   "collectives run";
}

void CudaBackend::setupAlgorithms() {
  algos_ = std::make_unique<AlgoSet<DeviceAlgo>>(makeDeviceAlgorithms());
  barrier_ = algos_->find(CollType::Barrier, Algo::PeerBarrier);
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

// An algorithm runs a call when it accepts the arguments and none of its staging regions failed
// to allocate (peer_mem.h: every rank knows the same failures).
bool CudaBackend::runs(const DeviceAlgo& alg, const CollArgs& a) const {
  return alg.canRun(a, ctx_) && !(alg.regions(a) & pm_.failed);
}

Caps CudaBackend::caps(const CollArgs& a) const {
  Caps c;
  c.worldSize = ctx_.size;
  c.nccl = ncclRefusal_.empty();
  c.plainNccl = plainNccl_;
  c.timed = pm_.sharing.empty();
  c.peer = ctx_.peerUsable() && a.count > 0 && ddaOpSupported(a.op.kind, a.dtype);
  c.dataAsFlag = !gpurt::kHip;  // docs/design/amd.md
  switch (a.type) {
    case CollType::AllGather:
    case CollType::ReduceScatter:
    case CollType::AllToAll:
    case CollType::AllToAllV: {
      // Copies take any dtype; a reduce-scatter the allreduce's dtypes and ops.
      const bool reduce = a.type == CollType::ReduceScatter;
      c.peer = ctx_.peerUsable() && (a.type == CollType::AllToAllV || a.count > 0) &&
               (!reduce || ddaOpSupported(a.op.kind, a.dtype));
      break;
    }
    case CollType::AllToAllVDevice:  // counts unknown here: the kernel takes any
      c.peer = ctx_.peerUsable();
      break;
    case CollType::Broadcast:
    case CollType::Reduce:
    case CollType::ReduceScatterV:
    case CollType::SendRecv: {
      // Rooted collectives, reduce-scatter-v and the lowered collectives (`what`) run on the
      // pipelined exchange (its plan refuses batches of point-to-point messages).
      const bool reduce = a.type == CollType::Reduce || a.type == CollType::ReduceScatterV;
      c.peer = ctx_.peerUsable() && (!reduce || ddaOpSupported(a.op.kind, a.dtype));
      break;
    }
    default: break;
  }
  // Every catalogue algorithm of the collective: on when its object accepts the call and its
  // staging did not fail (after a failed growth, select() therefore never returns it again).
  algos_->allow(c, a, cfg_, [&](const DeviceAlgo& alg, const CollArgs& x) { return runs(alg, x); });
  return c;
}

Algo CudaBackend::select(const CollArgs& a) const { return cclx::select(a, cfg_, caps(a)); }

// The object of (collective, algorithm); nullptr for the kNoKernel rows (NCCL, the unfused
// sequence). select() only returns an algorithm with an object here or one of those.
DeviceAlgo* CudaBackend::algoFor(const CollArgs& a, Algo algo) const {
  if (row(algo).flags & kNoKernel) return nullptr;
  DeviceAlgo* alg = algos_->find(a.type, algo);
  CCLX_REQUIRE(alg, cclxInternalError, "%s: algorithm '%s' is not registered for it",
               collLabel(a), algoName(algo));
  return alg;
}

std::string CudaBackend::selectAllReduce(const CollArgs& a) {
  const Algo algo = select(a);
  if (a.type == CollType::AllReduceRmsNorm && (algo == Algo::Base || algo == Algo::Unfused)) {
    const CollArgs ar = rmsUnfusedAllReduce(a, nullptr);
    return "unfused(" + (algo == Algo::Base ? std::string("nccl") : selectAllReduce(ar)) + ")";
  }
  return algo == Algo::Base ? "nccl" : algoName(algo);
}

void CudaBackend::enqueueRmsUnfused(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing) {
  CollArgs ar = rmsUnfusedAllReduce(a, a.rms.out);
  // The allreduce of the sequence may need staging of its own (collective: every rank derives
  // the same inner algorithm).
  Algo inner = Algo::Base;
  try {
    if (algo != Algo::Base) inner = growStaging(ar, select(ar), capturing);
  } catch (const Error&) {
    poisonOutputs(a, ctx_.size, capturing);  // residualOut and the FP8 outputs too
    throw;
  }
  if (inner == Algo::Base) requireNccl(ar);
  std::optional<gpures::StreamTemp> tmp;
  if (!ar.recv) {  // FP8 output only: the allreduce result needs a place
    ar.recv = tmp.emplace(a.bytes(), s).get();
  }
  enqueue(ar, inner, s, capturing);
  launchRmsLocal(a, ar.recv, ctx_, s);
  if (tmp) tmp->free();
}

// What no algorithm of this comm can run fails here, before anything is enqueued.
void CudaBackend::checkUsable(const CollArgs& a) const {
  if (isBitwise(a.op.kind) && (a.type == CollType::AllReduce || a.type == CollType::Reduce ||
                               a.type == CollType::ReduceScatter ||
                               a.type == CollType::ReduceScatterV)) {
    CCLX_REQUIRE(a.type == CollType::AllReduce || a.type == CollType::ReduceScatter,
                 cclxUnsupported,
                 "%s with %s is not supported on CUDA comms (NCCL has no bitwise reductions)",
                 collName(a.type), opName(a.op.kind));
    CCLX_REQUIRE(ctx_.peerUsable() && ddaOpSupported(a.op.kind, a.dtype), cclxUnsupported,
                 "%s %s on CUDA needs peer memory (%s) and an integer type", collName(a.type),
                 opName(a.op.kind), pm_.whyNot.empty() ? "available" : pm_.whyNot.c_str());
  }
  if (a.type == CollType::AllToAllV && size_t(ctx_.rank) < a.sendCounts.size() &&
      size_t(ctx_.rank) < a.recvCounts.size())
    CCLX_ARG_CHECK(a.sendCounts[size_t(ctx_.rank)] == a.recvCounts[size_t(ctx_.rank)],
                   "all_to_all_v: rank %d sends %zu elements to itself but expects %zu", ctx_.rank,
                   a.sendCounts[size_t(ctx_.rank)], a.recvCounts[size_t(ctx_.rank)]);
}

void CudaBackend::requireNccl(const CollArgs& a) const {
  if (!sh_->comm)
    CCLX_THROW(cclxUnsupported, "rank %d: %s needs NCCL, which this comm does not have: %s",
               ctx_.rank, collLabel(a),
               ncclRefusal_.empty() ? "NCCL was torn down" : ncclRefusal_.c_str());
}

// Peer-memory kernels of one rank must run in launch order (their slot-reuse arguments rely on
// it): when the stream changes between eager calls, the new stream waits for the last one.
// Inside CUDA-graph capture the same holds within one capture: a peer kernel captured on another
// stream of the capture than the previous one waits for it (an edge in the graph), so two calls
// never become parallel nodes sharing counters and slots. Captures of different graphs, and
// eager calls against graph replays, follow the application's stream order.
void CudaBackend::orderPeerKernel(cudaStream_t s, bool capturing) {
  if (!capturing) {
    if (orderValid_ && orderStream_ != s)
      CCLX_CUDA_CHECK(cudaStreamWaitEvent(s, orderEv_.get(), 0));
    return;
  }
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  CCLX_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &st, &id));
  if (captureValid_ && captureId_ == id && captureStream_ != s)
    CCLX_CUDA_CHECK(cudaStreamWaitEvent(s, captureEv_.get(), 0));
}
void CudaBackend::peerKernelDone(cudaStream_t s, bool capturing) {
  if (capturing) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    CCLX_CUDA_CHECK(cudaStreamGetCaptureInfo(s, &st, &id));
    CCLX_CUDA_CHECK(cudaEventRecord(captureEv_.get(), s));
    captureId_ = id;
    captureStream_ = s;
    captureValid_ = true;
    return;
  }
  CCLX_CUDA_CHECK(cudaEventRecord(orderEv_.get(), s));
  orderStream_ = s;
  orderValid_ = true;
}

// Allocates the staging `algo` needs for this call, if it is not there yet: collective (every
// rank selected the same algorithm for the same call, so every rank grows here alike), through
// the signal areas, on the growth stream. A failed allocation somewhere turns those regions off
// on every rank and the call chooses again; a rank that never arrives fails the comm naming it.
Algo CudaBackend::growStaging(const CollArgs& a, Algo algo, bool capturing, bool chooseAgain) {
  for (int attempt = 0; attempt <= kNumStagingRegions; ++attempt) {
    DeviceAlgo* alg = algoFor(a, algo);
    if (!alg) return algo;
    const uint32_t need = alg->regions(a) & ~pm_.allocated;
    if (!need) return algo;
    RelaxedCapture relaxed(capturing);  // host calls only; legal while the caller captures
    bool ok = false;
    GrowAbort ga;
    try {
      ok = peerMemGrow(pm_, need, a.opts.timeout, growStream_.get(), &ga);
    } catch (const Error& e) {
      // Every peer learns it at once: from the abort word (peers waiting in their growth poll
      // it; kernels read it), naming the missing ranks as a kernel's own timeout would.
      raiseGrowAbort(ga);
      poisonOutputs(a, ctx_.size, capturing);
      throw sh_->fail(e.code(), strFormat("%s; comm '%s' is unusable", e.what(), sh_->name.c_str()));
    }
    if (ok) return algo;
    if (!chooseAgain) return Algo::Base;  // the caller chooses from the call it lowered
    algo = select(a);
    if (algo == Algo::Base) requireNccl(a);
  }
  return algo;
}

bool CudaBackend::stagingReady(const CollArgs& a, Algo algo) const {
  const DeviceAlgo* alg = algoFor(a, algo);
  return !alg || !(alg->regions(a) & ~pm_.allocated);
}

void CudaBackend::enqueue(const CollArgs& a, Algo algo, cudaStream_t s, bool capturing) {
  // Per-pair counts: a grouped form's peer kernel runs on every rank, whatever this rank's count.
  if (isEmpty(a, algoFor(a, algo) != nullptr)) return;
  if (a.type == CollType::AllReduceRmsNorm && (algo == Algo::Base || algo == Algo::Unfused))
    return enqueueRmsUnfused(a, algo, s, capturing);
  if (DeviceAlgo* alg = algoFor(a, algo)) {
    orderPeerKernel(s, capturing);
    if (xchgNeedsStagedInput(a, ctx_.rank, ctx_.size)) {
      // Input and output overlap other than in place: the kernel reads a stream-ordered copy of
      // the input (legal inside capture, as NCCL's temporaries).
      // All-to-all-v-device: the counts are not known here, so the whole input.
      const size_t in = inputBytes(a, ctx_.size);
      gpures::StreamTemp tmp(in, s);
      CCLX_CUDA_CHECK(cudaMemcpyAsync(tmp.get(), a.send, in, cudaMemcpyDeviceToDevice, s));
      CollArgs b = a;
      b.send = tmp.get();
      alg->launch(b, ctx_, s);
      tmp.free();
    } else {
      alg->launch(a, ctx_, s);
    }
    peerKernelDone(s, capturing);
    return;
  }
  if (a.type == CollType::AllToAllVDevice && ctx_.size == 1)  // one rank: a local copy
    return launchDeviceRowsLocal(a, ctx_, s);
  requireNccl(a);
  if (a.type == CollType::Barrier) {  // a 1-element NCCL allreduce
    CollArgs b;
    b.type = CollType::AllReduce;
    b.send = b.recv = scratch_.get();
    b.count = 1;
    b.dtype = DataType::i32;
    return ncclRunCollective(b, sh_->comm, ctx_.rank, ctx_.size, s);
  }
  if (a.type == CollType::ReduceScatterQuantized)
    return quantizedViaNccl(a, sh_->comm, ctx_.rank, ctx_.size, s);  // gpu/quantized
  if (a.type == CollType::AllToAllVDevice) return enqueueAllToAllVDeviceNccl(a, s);
  ncclRunCollective(a, sh_->comm, ctx_.rank, ctx_.size, s);
}

// all_to_all_v_device through NCCL, the one path that waits for the stream on the host: into a
// pinned buffer of the comm's (never freed while a gather may be pending), bounded by the call's
// deadline, NCCL's asynchronous error and the comm's failure, the pending gather shown to the
// watchdog meanwhile (an operation of its own: a start event before, an end event once queued).
// Split sizes that disagree leave the comm usable; any other failure fails it and aborts NCCL.
void CudaBackend::enqueueAllToAllVDeviceNccl(const CollArgs& a, cudaStream_t s) {
  if (!sh_->a2avHost) {
    void* p = nullptr;
    CCLX_CUDA_CHECK(cudaHostAlloc(&p, ncclAllToAllVDeviceHostBytes(kMaxRanks), cudaHostAllocDefault));
    sh_->a2avHost = static_cast<int64_t*>(p);
  }
  cudaEvent_t start = nullptr;
  if (cfg_.watchdog) {
    start = sh_->takeEvent();
    if (cudaEventRecord(start, s) != cudaSuccess) {
      (void)cudaGetLastError();
      sh_->returnEvent(start);
      start = nullptr;
    }
  }
  const auto queued = [&] {
    if (!start) return;
    EventRef end = sh_->takeEventRef(sh_);
    if (cudaEventRecord(end.get(), s) != cudaSuccess) {
      (void)cudaGetLastError();
      sh_->returnEvent(start);
      start = nullptr;
      return;
    }
    std::lock_guard<std::mutex> g(opsMu_);
    ncclOps_.push_back(NcclOp{a.type, start, std::move(end), {}, a.opts.timeout, s});
    start = nullptr;  // the watchdog's now
  };
  try {
    ncclAllToAllVDevice(a, sh_->comm, ctx_.rank, ctx_.size, s, sh_->a2avHost, queued, &sh_->failed);
  } catch (const Error& e) {
    if (start) sh_->returnEvent(start);
    if (e.code() == cclxInvalidUsage) throw;  // every rank's verdict alike; the comm stays usable
    sh_->requestAbort();
    sh_->abortNccl();  // the gather of the split sizes may still be pending
    throw sh_->fail(e.code(), strFormat("%s; comm '%s' is unusable", e.what(), sh_->name.c_str()));
  }
}

std::string CudaBackend::failureMessage() const {
  std::lock_guard<std::mutex> g(sh_->mu);
  return sh_->failMsg;
}

std::shared_ptr<Work> CudaBackend::run(const CollArgs& in, Algo& ran) {
  // Without NCCL (ranks sharing a GPU) a single send or receive is a batch of one message, which
  // the pipelined exchange runs between the two ranks alone.
  CollArgs p2p;
  const bool single = (in.type == CollType::Send || in.type == CollType::Recv) && !ncclRefusal_.empty();
  if (single) {
    p2p = in;
    p2p.type = CollType::SendRecv;
    p2p.root = -1;
    if (in.type == CollType::Send) p2p.sends = {P2PSend{in.root, in.send, in.count}};
    else p2p.recvs = {P2PRecv{in.root, in.recv, in.count}};
    p2p.send = nullptr;
    p2p.recv = nullptr;
  }
  const CollArgs& call = single ? p2p : in;
  std::lock_guard<std::mutex> lock(runMu_);
  CCLX_REQUIRE(!finalized_, cclxInvalidUsage, "the CUDA communicator was finalized");
  sh_->throwIfFailed();
  sh_->checkDeviceError();
  checkUsable(call);
  DeviceGuard guard(sh_->device);
  cudaStream_t user = static_cast<cudaStream_t>(call.opts.stream);
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  CCLX_CUDA_CHECK(cudaStreamIsCapturing(user, &cs));
  const bool capturing = cs != cudaStreamCaptureStatusNone;
  // What the call runs on, in the order of core/select/call_plan.h.
  const CallSteps steps{
      [this](const CollArgs& c) { return select(c); },
      [this, capturing](const CollArgs& c, Algo al, bool again) {
        return growStaging(c, al, capturing, again);
      },
      [this](const CollArgs& c) { requireNccl(c); }};
  CallPlan plan = planCall(call, steps);
  // The NCCL drop-in's call: NCCL takes what does not run on a peer algorithm and, while the
  // stream captures, what would grow staging first (no growth inside capture).
  if (call.peersOnly &&
      (plan.algo == Algo::Base || (capturing && !stagingReady(plan.args(call), plan.algo))))
    return nullptr;
  // Host-only queries (pointer attributes, event creation) are harmless during capture, but a
  // global-mode capture may count them as unsafe: run them with this thread in relaxed mode.
  RelaxedCapture relaxed(capturing);
  if (!call.opts.buffersChecked) checkPointers(call);  // before growth: a failed growth poisons outputs
  growPlan(plan, call,
           CallPlace{ctx_.rank, ctx_.size, capturing,
                     ctx_.peerUsable() ? "its peer-memory kernel is not selected or its staging failed"
                                       : pm_.whyNot},
           steps);
  const CollArgs& a = plan.args(call);
  const Algo algo = ran = plan.algo;
  cudaStream_t s = user;
  if (a.opts.async) {
    CCLX_CUDA_CHECK(cudaEventRecord(forkEv_.get(), user));
    CCLX_CUDA_CHECK(cudaStreamWaitEvent(internal_.get(), forkEv_.get(), 0));
    s = internal_.get();
  }
  // NCCL operations of eager calls are watched (core/failure/watchdog.h): a start event before, the
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
  if ((!a.opts.async && capturing) || a.peersOnly) return completedWork();
  EventRef ev = sh_->takeEventRef(sh_);
  CCLX_CUDA_CHECK(cudaEventRecord(ev.get(), s));
  if (start) {
    std::lock_guard<std::mutex> g(opsMu_);
    ncclOps_.push_back(NcclOp{a.type, start, ev, {}, a.opts.timeout, s});
    if (++opsPushed_ % kReapEvery == 0) reapNcclOpsLocked(s);
  }
  return makeCudaWork(sh_, std::move(ev), capturing, a.opts.timeout);
}

}  // namespace cclx
