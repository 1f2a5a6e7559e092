// CclxWindow (window.h): torchcomms' window calls onto cclx::Window.
#include "torchcomms/window.h"

#include "torchcomms/device.h"
#include "torchcomms/work.h"

#include <ATen/MapAllocator.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <cstring>

namespace cclx::tc {

namespace {

void freeSharedCtx(void* ctx) { freeShared(ctx); }

// A CPU tensor's storage in memory the peers of a CPU comm can map: kept when it is cclx's shared
// memory already or torch's (a storage shared with torch's file-system strategy: cclx's window
// decides whether it can map it), otherwise moved into a new shared-memory file. Every tensor
// viewing the storage follows the move.
void shareStorage(const at::Tensor& t) {
  const c10::Storage& st = t.storage();
  const at::DataPtr& dp = st.data_ptr();
  if (dp.get_deleter() == &freeSharedCtx || at::MapAllocator::fromDataPtr(dp) ||
      at::RefcountedMapAllocator::fromDataPtr(dp))
    return;
  const size_t n = st.nbytes();
  void* p = allocShared(std::max<size_t>(n, 1));
  if (n) std::memcpy(p, st.data(), n);
  st.set_data_ptr_noswap(at::DataPtr(p, p, &freeSharedCtx, at::Device(at::kCPU)));
}

template <typename O>
CollOptions windowOpts(bool asyncOp, const O& o, const at::Device& dev) {
  CollOptions c;
  c.async = asyncOp && dev.type() == at::kCUDA;
  c.stream = currentStream(dev);
  c.timeout = o.timeout.count() > 0 ? o.timeout : std::chrono::milliseconds{0};
  if (!o.hints.empty()) c.hints = cclxHints(o.hints);
  return c;
}

}  // namespace

CclxWindow::CclxWindow(std::shared_ptr<Comm> comm, const at::Device& device)
    : comm_(std::move(comm)), device_(device) {
  win_ = comm_->newWindow();
  buf_device_ = device_;
}

Window& CclxWindow::win(const char* what) {
  if (!win_) throw Error(cclxInvalidUsage, std::string(what) + ": the window is gone");
  return *win_;
}

c10::intrusive_ptr<tcx::TorchWork> CclxWindow::done(bool asyncOp, std::shared_ptr<Work> w,
                                                    std::vector<at::Tensor> keep,
                                                    std::chrono::milliseconds timeout) const {
  const bool cudaAsync = asyncOp && device_.type() == at::kCUDA;
  if (timeout.count() <= 0) timeout = comm_->options().timeout;
  return makeWork(cudaAsync, std::move(w), cudaAsync ? std::move(keep) : std::vector<at::Tensor>{},
                  timeout);
}

void CclxWindow::tensor_register(const at::Tensor& tensor, bool owning) {
  guarded("tensor_register", [&] {
    checkTensor(tensor, device_, "tensor_register");
    if (device_.type() == at::kCPU) shareStorage(tensor);
    Buf b = dataBuf(tensor, "tensor_register");
    win("tensor_register").registerBuffer(b.ptr, b.count, b.dtype);
    win_size_ = tensor.nbytes();
    buf_dtype_ = tensor.scalar_type();
    buf_shape_.assign(tensor.sizes().begin(), tensor.sizes().end());
    buf_device_ = tensor.device();
    if (owning) {
      buf_tensor_ = tensor;
    } else {
      buf_tensor_.reset();
    }
  });
}

void CclxWindow::tensor_deregister() {
  guarded("tensor_deregister", [&] {
    Window& w = win("tensor_deregister");
    try {
      w.deregisterBuffer();
    } catch (...) {
      if (w.registered()) throw;  // nothing released: the registration stands
      buf_tensor_.reset();
      win_size_ = 0;
      throw;
    }
    buf_tensor_.reset();
    win_size_ = 0;
  });
}

std::shared_ptr<tcx::TorchCommWindow> CclxWindow::clone() {
  return guarded("clone", [&]() -> std::shared_ptr<tcx::TorchCommWindow> {
    auto c = std::make_shared<CclxWindow>(comm_, device_);
    if (win("clone").registered()) {
      at::Tensor mine =
          buf_tensor_ ? *buf_tensor_ : map_remote_tensor(comm_->rank());
      c->tensor_register(mine.clone(), true);
    }
    return c;
  });
}

c10::intrusive_ptr<tcx::TorchWork> CclxWindow::put(const at::Tensor& tensor, int dstRank,
                                                   size_t targetOffsetNelems, bool asyncOp,
                                                   const tcx::PutOptions& options) {
  return guarded("put", [&] {
    Window& w = win("put");
    checkTensor(tensor, device_, "put");
    if (w.registered() && tensor.scalar_type() != buf_dtype_)
      throw Error(cclxInvalidArgument, std::string("put: tensor dtype ") +
                                           c10::toString(tensor.scalar_type()) +
                                           " differs from the window's " +
                                           c10::toString(buf_dtype_));
    Buf b = dataBuf(tensor, "put");
    auto o = windowOpts(asyncOp, options, device_);
    auto work = w.put(b.ptr, b.count, dstRank, targetOffsetNelems, o);
    std::vector<at::Tensor> keep{tensor};
    if (buf_tensor_) keep.push_back(*buf_tensor_);
    return done(asyncOp, std::move(work), std::move(keep), o.timeout);
  });
}

c10::intrusive_ptr<tcx::TorchWork> CclxWindow::signal(int peerRank, bool asyncOp,
                                                      const tcx::SignalOptions& options) {
  return guarded("signal", [&] {
    auto o = windowOpts(asyncOp, options, device_);
    return done(asyncOp, win("signal").signal(peerRank, o), {}, o.timeout);
  });
}

c10::intrusive_ptr<tcx::TorchWork> CclxWindow::wait_signal(int peerRank, bool asyncOp,
                                                           const tcx::WaitSignalOptions& options) {
  return guarded("wait_signal", [&] {
    auto o = windowOpts(asyncOp, options, device_);
    std::vector<at::Tensor> keep;
    if (buf_tensor_) keep.push_back(*buf_tensor_);
    return done(asyncOp, win("wait_signal").waitSignal(peerRank, o), std::move(keep), o.timeout);
  });
}

at::Tensor CclxWindow::map_remote_tensor(int rank) {
  return guarded("map_remote_tensor", [&] {
    Window& w = win("map_remote_tensor");
    void* p = w.remotePtr(rank);  // checks: registered, rank in range, directly accessible
    if (rank == comm_->rank() && buf_tensor_) return *buf_tensor_;
    // The memory as this rank's device addresses it: a peer's mapping reports the peer's GPU to
    // the runtime, so the device is given rather than asked for.
    return at::for_blob(p, buf_shape_)
        .options(at::TensorOptions().dtype(buf_dtype_).device(device_))
        .target_device(device_)
        .make_tensor();
  });
}

std::shared_ptr<tcx::TorchCommWindowAttr> CclxWindow::get_attr(int peerRank) {
  return guarded("get_attr", [&] {
    auto a = std::make_shared<tcx::TorchCommWindowAttr>();
    a->accessType = win("get_attr").access(peerRank) == WinAccess::Unified
                        ? tcx::TorchCommWinAccessType::WIN_ACCESS_TYPE_UNIFIED
                        : tcx::TorchCommWinAccessType::WIN_ACCESS_TYPE_SEPARATE;
    return a;
  });
}

#if CCLX_TC_DEVICE_API
void* CclxWindow::get_device_window(int signal_count, int counter_count, int barrier_count) {
  return guarded("get_device_window", [&] {
    return win("get_device_window").deviceWindow(signal_count, counter_count, barrier_count);
  });
}

tcx::RegisteredBuffer CclxWindow::register_local_buffer(const at::Tensor& tensor) {
  return guarded("register_local_buffer", [&] {
    checkTensor(tensor, device_, "register_local_buffer");
    tcx::RegisteredBuffer b;
    b.base_ptr = tensor.data_ptr();
    b.size = tensor.nbytes();
    b.backend_window = nullptr;
    return b;
  });
}

void CclxWindow::deregister_local_buffer(tcx::RegisteredBuffer& buf) { buf = tcx::RegisteredBuffer{}; }
#endif

}  // namespace cclx::tc
