// CclxBackend's collectives and point-to-point operations (backend.h): each maps onto the
// cclx::Comm call of the same meaning. Inputs that are not contiguous travel as contiguous
// copies; outputs must be contiguous. Every tensor must be on the comm's device, except CPU
// tensors on a CUDA comm, which go through device twins (staging.h: such a call completes inside
// the call). Each emits torchcomms' profiler event (TracingGuard: "record_param_comms" with the
// collective's name, tensors and sizes), as torchcomms' own backends do.
#include "torchcomms/backend.h"

#include <comms/torchcomms/utils/TracingGuard.hpp>

#include "torchcomms/counts.h"
#include "torchcomms/device.h"
#include "torchcomms/staging.h"
#include "torchcomms/work.h"

namespace cclx::tc {

namespace {

void sameType(const at::Tensor& a, const at::Tensor& b, const char* what) {
  if (a.scalar_type() != b.scalar_type())
    throw Error(cclxInvalidArgument, std::string(what) + ": dtype " +
                                         std::string(c10::toString(b.scalar_type())) +
                                         " differs from the input's " +
                                         std::string(c10::toString(a.scalar_type())));
}

size_t rowElems(const at::Tensor& t) {
  if (t.dim() == 0) return 1;
  return t.size(0) ? size_t(t.numel() / t.size(0)) : 0;
}

}  // namespace

template <typename O>
CollOptions CclxBackend::callOpts(bool async_op, const O& o, const Staging& s) const {
  CollOptions c;
  c.async = (async_op && device_.type() == at::kCUDA) || s.staged();
  c.stream = currentStream(device_);
  c.buffersChecked = true;  // every tensor passed Staging's device check (CUDA comms)
  c.timeout = o.timeout.count() > 0 ? o.timeout : std::chrono::milliseconds{0};
  if (!o.hints.empty()) c.hints = cclxHints(o.hints);
  return c;
}

// Instantiated here for the extension methods (ext/methods.cc).
template CollOptions CclxBackend::callOpts(bool, const tcx::AllGatherPExecOptions&,
                                           const Staging&) const;
template CollOptions CclxBackend::callOpts(bool, const tcx::AllToAllvSingleOptions&,
                                           const Staging&) const;
template CollOptions CclxBackend::callOpts(bool, const tcx::ReduceScatterSingleOptions&,
                                           const Staging&) const;

WorkPtr CclxBackend::done(bool async_op, std::shared_ptr<Work> w, TensorList keep,
                          std::chrono::milliseconds timeout, Staging& s) const {
  if (s.staged()) {
    s.complete(w.get(), timeout);
    WorkPtr work =
        makeWork(false, nullptr, {}, timeout.count() > 0 ? timeout : comm_->options().timeout);
    static_cast<CclxWork*>(work.get())->traceWaitAs(name_, traceSize(), traceRank());
    static_cast<CclxWork*>(work.get())->setDevice(device_);
    return work;
  }
  const bool cudaAsync = async_op && device_.type() == at::kCUDA;
  if (timeout.count() <= 0) timeout = comm_->options().timeout;
  WorkPtr work =
      makeWork(cudaAsync, std::move(w), cudaAsync ? std::move(keep) : TensorList{}, timeout);
  static_cast<CclxWork*>(work.get())->traceWaitAs(name_, traceSize(), traceRank());
  static_cast<CclxWork*>(work.get())->setDevice(device_);
  return work;
}

WorkPtr CclxBackend::send(const at::Tensor& tensor, int dst, bool async_op,
                          const tcx::SendOptions& options) {
  return guarded("send", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "send", dst, tensor, tensor);
    Staging s(device_);
    at::Tensor t = s.in(tensor, "send");
    Buf b = dataBuf(t, "send");
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("send").send(b.ptr, b.count, b.dtype, dst, o), {t}, o.timeout, s);
  });
}

WorkPtr CclxBackend::recv(at::Tensor& tensor, int src, bool async_op,
                          const tcx::RecvOptions& options) {
  return guarded("recv", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "recv", src, tensor, tensor);
    Staging s(device_);
    Buf b = dataBuf(s.out(tensor, "recv"), "recv");
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("recv").recv(b.ptr, b.count, b.dtype, src, o), {tensor},
                o.timeout, s);
  });
}

WorkPtr CclxBackend::batch_op_issue(const std::vector<tcx::BatchSendRecv::P2POp>& ops,
                                    bool async_op, const tcx::BatchP2POptions& options) {
  return guarded("batch_op_issue", [&] {
    TensorList sent, received;  // the profiler's view: every message, sends as inputs
    for (const auto& op : ops)
      (op.type == tcx::BatchSendRecv::P2POp::OpType::SEND ? sent : received).push_back(op.tensor);
    tcx::TracingGuard trace(name_, traceSize(), "batch_op_issue", traceRank(), sent, received);
    Staging s(device_);
    // One grouped operation; every message travels as bytes, so one batch may mix dtypes.
    std::vector<P2PSend> sends;
    std::vector<P2PRecv> recvs;
    TensorList keep;
    for (const auto& op : ops) {
      if (op.type == tcx::BatchSendRecv::P2POp::OpType::SEND) {
        at::Tensor t = s.in(op.tensor, "batch_op_issue send");
        sends.push_back({op.peer, t.numel() ? t.data_ptr() : nullptr, size_t(t.nbytes())});
        keep.push_back(t);
      } else {
        at::Tensor t = s.out(op.tensor, "batch_op_issue recv");
        recvs.push_back({op.peer, t.numel() ? t.data_ptr() : nullptr, size_t(t.nbytes())});
        keep.push_back(t);
      }
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("batch_op_issue").sendRecv(sends, recvs, DataType::u8, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::broadcast(at::Tensor& tensor, int root, bool async_op,
                               const tcx::BroadcastOptions& options) {
  return guarded("broadcast", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "broadcast", traceRank(), tensor, tensor);
    Staging s(device_);
    Buf b = dataBuf(s.out(tensor, "broadcast"), "broadcast");
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("broadcast").broadcast(b.ptr, b.ptr, b.count, b.dtype, root, o),
                {tensor}, o.timeout, s);
  });
}

WorkPtr CclxBackend::all_reduce(at::Tensor& tensor, const tcx::ReduceOp& op, bool async_op,
                                const tcx::AllReduceOptions& options) {
  return guarded("all_reduce", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_reduce", traceRank(), tensor, tensor);
    Staging s(device_);
    ReduceOp rop;
    const at::Tensor f = deviceFactor(op);
    const at::Tensor t = premultiply(s.out(tensor, "all_reduce"), f, true);
    Buf b = reduceBuf(t, op, &rop, "all_reduce", f.defined());
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("all_reduce").allReduce(b.ptr, b.ptr, b.count, b.dtype, rop, o),
                {tensor}, o.timeout, s);
  });
}

WorkPtr CclxBackend::reduce(const at::Tensor& tensor, int root, const tcx::ReduceOp& op,
                            bool async_op, const tcx::ReduceOptions& options) {
  return guarded("reduce", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "reduce", root, tensor, tensor);
    Staging s(device_);
    ReduceOp rop;
    Comm& c = comm("reduce");
    const at::Tensor f = deviceFactor(op);
    // The root's tensor is its output (scaled in place); another rank's input stays as given.
    const at::Tensor t =
        premultiply(s.out(tensor, "reduce"), f, c.rank() == root);
    Buf b = reduceBuf(t, op, &rop, "reduce", f.defined());
    auto o = callOpts(async_op, options, s);
    void* recv = c.rank() == root ? b.ptr : nullptr;
    return done(async_op, c.reduce(b.ptr, recv, b.count, b.dtype, rop, root, o), {tensor, t},
                o.timeout, s);
  });
}

WorkPtr CclxBackend::all_gather(const TensorList& tensor_list, const at::Tensor& tensor,
                                bool async_op, const tcx::AllGatherOptions& options) {
  return guarded("all_gather", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_gather", traceRank(), tensor_list, TensorList{tensor});
    Staging s(device_);
    at::Tensor in = s.in(tensor, "all_gather");
    Buf b = dataBuf(in, "all_gather");
    std::vector<void*> recvs;
    TensorList keep{in};
    for (const auto& t0 : tensor_list) {
      at::Tensor t = s.out(t0, "all_gather output");
      sameType(in, t, "all_gather output");
      if (t.numel() != in.numel())
        throw Error(cclxInvalidArgument, "all_gather: an output has " +
                                             std::to_string(t.numel()) + " elements, the input " +
                                             std::to_string(in.numel()));
      recvs.push_back(t.numel() ? t.data_ptr() : nullptr);
      keep.push_back(t);
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("all_gather").allGatherList(b.ptr, recvs, b.count, b.dtype, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::all_gather_v(const TensorList& tensor_list, const at::Tensor& tensor,
                                  bool async_op, const tcx::AllGatherOptions& options) {
  return guarded("all_gather_v", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_gather_v", traceRank(), tensor_list, TensorList{tensor});
    Staging s(device_);
    at::Tensor in = s.in(tensor, "all_gather_v");
    Buf b = dataBuf(in, "all_gather_v");
    const size_t scale = elementScale(size_t(in.element_size()), b.dtype);
    std::vector<void*> recvs;
    std::vector<size_t> counts;
    TensorList keep{in};
    for (const auto& t0 : tensor_list) {
      at::Tensor t = s.out(t0, "all_gather_v output");
      sameType(in, t, "all_gather_v output");
      recvs.push_back(t.numel() ? t.data_ptr() : nullptr);
      counts.push_back(size_t(t.numel()) * scale);
      keep.push_back(t);
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("all_gather_v").allGatherV(b.ptr, recvs, counts, b.dtype, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::all_gather_single(at::Tensor& output_t, const at::Tensor& input_t,
                                       bool async_op,
                                       const tcx::AllGatherSingleOptions& options) {
  return guarded("all_gather_single", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_gather_single", traceRank(), input_t, output_t);
    Staging s(device_);
    at::Tensor in = s.in(input_t, "all_gather_single");
    at::Tensor out = s.out(output_t, "all_gather_single output");
    sameType(in, output_t, "all_gather_single output");
    Comm& c = comm("all_gather_single");
    if (output_t.numel() != in.numel() * c.size())
      throw Error(cclxInvalidArgument,
                  "all_gather_single: the output has " + std::to_string(output_t.numel()) +
                      " elements, expected " + std::to_string(in.numel() * c.size()));
    Buf b = dataBuf(in, "all_gather_single");
    Buf ob = dataBuf(out, "all_gather_single");
    auto o = callOpts(async_op, options, s);
    return done(async_op, c.allGather(b.ptr, ob.ptr, b.count, b.dtype, o), {in, output_t},
                o.timeout, s);
  });
}

WorkPtr CclxBackend::reduce_scatter(at::Tensor& output_t, const TensorList& input_list,
                                    const tcx::ReduceOp& op, bool async_op,
                                    const tcx::ReduceScatterOptions& options) {
  return guarded("reduce_scatter", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "reduce_scatter", traceRank(), input_list, TensorList{output_t});
    Staging s(device_);
    ReduceOp rop;
    const at::Tensor factor = deviceFactor(op);
    Buf ob = reduceBuf(s.out(output_t, "reduce_scatter output"), op, &rop,
                       "reduce_scatter", factor.defined());
    std::vector<const void*> sends;
    TensorList keep{output_t};
    for (const auto& t0 : input_list) {
      at::Tensor t = s.in(t0, "reduce_scatter input");
      sameType(output_t, t, "reduce_scatter input");
      t = premultiply(t, factor, false);
      if (t.numel() != output_t.numel())
        throw Error(cclxInvalidArgument, "reduce_scatter: an input has " +
                                             std::to_string(t.numel()) +
                                             " elements, the output " +
                                             std::to_string(output_t.numel()));
      sends.push_back(t.numel() ? t.data_ptr() : nullptr);
      keep.push_back(t);
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op,
                comm("reduce_scatter").reduceScatterList(sends, ob.ptr, ob.count, ob.dtype, rop, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::reduce_scatter_v(at::Tensor& output_t, const TensorList& input_list,
                                      const tcx::ReduceOp& op, bool async_op,
                                      const tcx::ReduceScatterOptions& options) {
  return guarded("reduce_scatter_v", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "reduce_scatter_v", traceRank(), input_list, TensorList{output_t});
    Staging s(device_);
    ReduceOp rop;
    const at::Tensor factor = deviceFactor(op);
    Buf ob = reduceBuf(s.out(output_t, "reduce_scatter_v output"), op, &rop,
                       "reduce_scatter_v", factor.defined());
    // From the types, never from this rank's counts (a rank whose output is empty scales alike).
    const size_t scale = elementScale(size_t(output_t.element_size()), ob.dtype);
    std::vector<const void*> sends;
    std::vector<size_t> counts;
    TensorList keep{output_t};
    for (const auto& t0 : input_list) {
      at::Tensor t = s.in(t0, "reduce_scatter_v input");
      sameType(output_t, t, "reduce_scatter_v input");
      t = premultiply(t, factor, false);
      sends.push_back(t.numel() ? t.data_ptr() : nullptr);
      counts.push_back(size_t(t.numel()) * scale);
      keep.push_back(t);
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op,
                comm("reduce_scatter_v").reduceScatterV(sends, counts, ob.ptr, ob.dtype, rop, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::reduce_scatter_single(at::Tensor& output_t, const at::Tensor& input_t,
                                           const tcx::ReduceOp& op, bool async_op,
                                           const tcx::ReduceScatterSingleOptions& options) {
  return guarded("reduce_scatter_single", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "reduce_scatter_single", traceRank(), input_t, output_t);
    Staging s(device_);
    at::Tensor in = s.in(input_t, "reduce_scatter_single");
    at::Tensor out = s.out(output_t, "reduce_scatter_single output");
    sameType(in, output_t, "reduce_scatter_single output");
    Comm& c = comm("reduce_scatter_single");
    if (in.numel() != output_t.numel() * c.size())
      throw Error(cclxInvalidArgument,
                  "reduce_scatter_single: the input has " + std::to_string(in.numel()) +
                      " elements, expected " + std::to_string(output_t.numel() * c.size()));
    ReduceOp rop;
    const at::Tensor f = deviceFactor(op);
    in = premultiply(in, f, false);
    Buf ib = reduceBuf(in, op, &rop, "reduce_scatter_single", f.defined());
    Buf ob = reduceBuf(out, op, &rop, "reduce_scatter_single", f.defined());
    auto o = callOpts(async_op, options, s);
    return done(async_op, c.reduceScatter(ib.ptr, ob.ptr, ob.count, ob.dtype, rop, o),
                {in, output_t}, o.timeout, s);
  });
}

WorkPtr CclxBackend::all_to_all_single(at::Tensor& output_t, const at::Tensor& input_t,
                                       bool async_op,
                                       const tcx::AllToAllSingleOptions& options) {
  return guarded("all_to_all_single", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_to_all_single", traceRank(), input_t, output_t);
    Staging s(device_);
    at::Tensor in = s.in(input_t, "all_to_all_single");
    at::Tensor out = s.out(output_t, "all_to_all_single output");
    sameType(in, output_t, "all_to_all_single output");
    Comm& c = comm("all_to_all_single");
    if (in.numel() != output_t.numel() || in.numel() % c.size() != 0)
      throw Error(cclxInvalidArgument,
                  "all_to_all_single: input and output must have the same number of elements, "
                  "a multiple of the comm size " + std::to_string(c.size()) + " (input " +
                      std::to_string(in.numel()) + ", output " +
                      std::to_string(output_t.numel()) + ")");
    Buf ib = dataBuf(in, "all_to_all_single");
    Buf ob = dataBuf(out, "all_to_all_single");
    auto o = callOpts(async_op, options, s);
    return done(async_op, c.allToAll(ib.ptr, ob.ptr, ib.count / size_t(c.size()), ib.dtype, o),
                {in, output_t}, o.timeout, s);
  });
}

WorkPtr CclxBackend::all_to_all_v_single(at::Tensor& output_t, const at::Tensor& input_t,
                                         const std::vector<uint64_t>& output_split_sizes,
                                         const std::vector<uint64_t>& input_split_sizes,
                                         bool async_op,
                                         const tcx::AllToAllvSingleOptions& options) {
  return guarded("all_to_all_v_single", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_to_all_v_single", traceRank(), input_t, output_t);
    Staging s(device_);
    at::Tensor in = s.in(input_t, "all_to_all_v_single");
    at::Tensor out = s.out(output_t, "all_to_all_v_single output");
    sameType(in, output_t, "all_to_all_v_single output");
    Buf ib = dataBuf(in, "all_to_all_v_single");
    Buf ob = dataBuf(out, "all_to_all_v_single");
    // Split sizes count dim-0 rows.
    const size_t inRow = rowElems(in) * (ib.dtype == DataType::u8 ? in.element_size() : 1);
    const size_t outRow =
        rowElems(output_t) * (ob.dtype == DataType::u8 ? output_t.element_size() : 1);
    std::vector<size_t> sc, rc;
    for (uint64_t s : input_split_sizes) sc.push_back(size_t(s) * inRow);
    for (uint64_t s : output_split_sizes) rc.push_back(size_t(s) * outRow);
    auto o = callOpts(async_op, options, s);
    return done(async_op,
                comm("all_to_all_v_single").allToAllV(ib.ptr, sc, ob.ptr, rc, ib.dtype, o),
                {in, output_t}, o.timeout, s);
  });
}

WorkPtr CclxBackend::all_to_all(const TensorList& output_tensor_list,
                                const TensorList& input_tensor_list, bool async_op,
                                const tcx::AllToAllOptions& options) {
  return guarded("all_to_all", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_to_all", traceRank(), input_tensor_list, output_tensor_list);
    Staging s(device_);
    if (input_tensor_list.empty() || output_tensor_list.size() != input_tensor_list.size())
      throw Error(cclxInvalidArgument, "all_to_all: the input and output lists must have one "
                                       "tensor per rank");
    const at::Tensor& first = input_tensor_list[0];
    DataType dt = dataBuf(first, "all_to_all").dtype;
    std::vector<const void*> sends;
    std::vector<void*> recvs;
    std::vector<size_t> sc, rc;
    TensorList keep;
    for (const auto& t0 : input_tensor_list) {
      at::Tensor t = s.in(t0, "all_to_all input");
      sameType(first, t, "all_to_all input");
      Buf b = dataBuf(t, "all_to_all");
      sends.push_back(b.ptr);
      sc.push_back(b.count);
      keep.push_back(t);
    }
    for (const auto& t0 : output_tensor_list) {
      at::Tensor t = s.out(t0, "all_to_all output");
      sameType(first, t, "all_to_all output");
      Buf b = dataBuf(t, "all_to_all");
      recvs.push_back(b.ptr);
      rc.push_back(b.count);
      keep.push_back(t);
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("all_to_all").allToAllList(sends, sc, recvs, rc, dt, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::barrier(bool async_op, const tcx::BarrierOptions& options) {
  return guarded("barrier", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "barrier", traceRank());
    Staging s(device_);
    auto o = callOpts(async_op, options, s);
    return done(async_op, comm("barrier").barrier(o), {}, o.timeout, s);
  });
}

WorkPtr CclxBackend::scatter(at::Tensor& output_tensor, const TensorList& input_tensor_list,
                             int root, bool async_op, const tcx::ScatterOptions& options) {
  return guarded("scatter", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "scatter", root, input_tensor_list, TensorList{output_tensor});
    Staging s(device_);
    Buf ob = dataBuf(s.out(output_tensor, "scatter output"), "scatter");
    Comm& c = comm("scatter");
    std::vector<const void*> sends(size_t(c.size()), nullptr);
    TensorList keep{output_tensor};
    if (c.rank() == root) {
      if (int(input_tensor_list.size()) != c.size())
        throw Error(cclxInvalidArgument, "scatter: the root passes one input per rank (" +
                                             std::to_string(c.size()) + "), got " +
                                             std::to_string(input_tensor_list.size()));
      for (size_t i = 0; i < input_tensor_list.size(); ++i) {
        at::Tensor t = s.in(input_tensor_list[i], "scatter input");
        sameType(output_tensor, t, "scatter input");
        if (t.numel() != output_tensor.numel())
          throw Error(cclxInvalidArgument, "scatter: an input has " +
                                               std::to_string(t.numel()) +
                                               " elements, the output " +
                                               std::to_string(output_tensor.numel()));
        sends[i] = t.numel() ? t.data_ptr() : nullptr;
        keep.push_back(t);
      }
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, c.scatter(sends, ob.ptr, ob.count, ob.dtype, root, o),
                std::move(keep), o.timeout, s);
  });
}

WorkPtr CclxBackend::gather(const TensorList& output_tensor_list, const at::Tensor& input_tensor,
                            int root, bool async_op, const tcx::GatherOptions& options) {
  return guarded("gather", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "gather", root, TensorList{input_tensor}, output_tensor_list);
    Staging s(device_);
    at::Tensor in = s.in(input_tensor, "gather");
    Buf b = dataBuf(in, "gather");
    Comm& c = comm("gather");
    std::vector<void*> recvs(size_t(c.size()), nullptr);
    TensorList keep{in};
    if (c.rank() == root) {
      if (int(output_tensor_list.size()) != c.size())
        throw Error(cclxInvalidArgument, "gather: the root passes one output per rank (" +
                                             std::to_string(c.size()) + "), got " +
                                             std::to_string(output_tensor_list.size()));
      for (size_t i = 0; i < output_tensor_list.size(); ++i) {
        at::Tensor t = s.out(output_tensor_list[i], "gather output");
        sameType(in, t, "gather output");
        if (t.numel() != in.numel())
          throw Error(cclxInvalidArgument, "gather: an output has " +
                                               std::to_string(t.numel()) +
                                               " elements, the input " +
                                               std::to_string(in.numel()));
        recvs[i] = t.numel() ? t.data_ptr() : nullptr;
        keep.push_back(t);
      }
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, c.gather(b.ptr, recvs, b.count, b.dtype, root, o), std::move(keep),
                o.timeout, s);
  });
}

WorkPtr CclxBackend::gather_single(at::Tensor& output_t, const at::Tensor& input_t, int root,
                                   bool async_op, const tcx::GatherSingleOptions& options) {
  return guarded("gather_single", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "gather_single", root, input_t, output_t);
    Staging s(device_);
    at::Tensor in = s.in(input_t, "gather_single");
    Buf b = dataBuf(in, "gather_single");
    Comm& c = comm("gather_single");
    void* recv = nullptr;
    TensorList keep{in};
    if (c.rank() == root) {
      at::Tensor out = s.out(output_t, "gather_single output");
      sameType(in, output_t, "gather_single output");
      if (output_t.numel() != in.numel() * c.size())
        throw Error(cclxInvalidArgument,
                    "gather_single: the output has " + std::to_string(output_t.numel()) +
                        " elements, expected " + std::to_string(in.numel() * c.size()));
      recv = out.numel() ? out.data_ptr() : nullptr;
      keep.push_back(output_t);
    }
    auto o = callOpts(async_op, options, s);
    return done(async_op, c.gatherSingle(b.ptr, recv, b.count, b.dtype, root, o),
                std::move(keep), o.timeout, s);
  });
}

}  // namespace cclx::tc
