// CclxBackend's methods beyond torchcomms' generic backend (backend.h): the persistent
// all-gather (torchcomms' all_gather_p_*), and NCCLX's backend-specific comm_dump,
// device_alltoallv_single and reduce_scatter_quantized, which Python reaches through
// torchcomm.get_backend_impl() (module.cc binds them). Each emits torchcomms' profiler event.
#include "torchcomms/backend.h"

#include <comms/torchcomms/utils/TracingGuard.hpp>

#include "torchcomms/counts.h"
#include "torchcomms/staging.h"
#include "torchcomms/work.h"

namespace cclx::tc {

namespace {

void requireOnDevice(const at::Tensor& t, const at::Device& dev, const char* what) {
  checkTensor(t, dev, what);
}

void requireType(const at::Tensor& t, at::ScalarType want, const char* what) {
  if (t.scalar_type() != want)
    throw Error(cclxInvalidArgument, std::string(what) + ": dtype " +
                                         std::string(c10::toString(t.scalar_type())) +
                                         ", expected " + std::string(c10::toString(want)));
}

}  // namespace

std::unordered_map<std::string, std::string> CclxBackend::comm_dump() {
  return guarded("comm_dump", [&] {
    std::unordered_map<std::string, std::string> out;
    for (auto& [k, v] : comm("comm_dump").dump()) out.emplace(k, v);
    return out;
  });
}

tcx::TorchCommBackend::AllGatherPHandle CclxBackend::all_gather_p_init(
    at::Tensor& output, const tcx::AllGatherPInitOptions& options) {
  return guarded("all_gather_p_init", [&]() -> AllGatherPHandle {
    comm("all_gather_p_init");
    requireOnDevice(output, device_, "all_gather_p_init: output");
    if (output.numel() == 0)
      throw Error(cclxInvalidArgument, "all_gather_p_init: the output is empty");
    (void)dataBuf(output, "all_gather_p_init");  // a type the all-gather moves
    if (!options.hints.empty()) (void)cclxHints(options.hints);
    auto h = std::make_unique<PersistentAllGather>();
    h->output = output;
    h->hints = options.hints;
    h->timeout = options.timeout.count() > 0 ? options.timeout : std::chrono::milliseconds{0};
    AllGatherPHandle key = h.get();
    persistent_.emplace(key, std::move(h));
    return key;
  });
}

void CclxBackend::set_config(const std::unordered_map<std::string, std::string>& hints) {
  guarded("set_config", [&] {
    std::map<std::string, std::string> mine;
    for (const auto& [k, v] : hints) mine[cclxKey(k)] = v;  // every key: unknown ones throw
    comm("set_config").updateHints(mine);  // checks every key and value first
    for (const auto& [k, v] : hints) options_.hints[k] = v;
  });
}

WorkPtr CclxBackend::all_gather_p_exec(AllGatherPHandle handle, const at::Tensor& input,
                                       bool async_op, const tcx::AllGatherPExecOptions& options) {
  return guarded("all_gather_p_exec", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "all_gather_p_exec", traceRank(),
                            TensorList{input}, TensorList{});
    auto it = persistent_.find(handle);
    if (it == persistent_.end())
      throw Error(cclxInvalidArgument,
                  "all_gather_p_exec: not a live handle of this communicator (freed, or from "
                  "all_gather_p_init of another one)");
    PersistentAllGather& h = *it->second;
    Comm& c = comm("all_gather_p_exec");
    requireOnDevice(input, device_, "all_gather_p_exec: input");
    if (input.scalar_type() != h.output.scalar_type())
      throw Error(cclxInvalidArgument, "all_gather_p_exec: the input's dtype " +
                                           std::string(c10::toString(input.scalar_type())) +
                                           " differs from the output's " +
                                           std::string(c10::toString(h.output.scalar_type())));
    const int64_t need = input.numel() * c.size();
    if (need > h.output.numel())
      throw Error(cclxInvalidArgument,
                  "all_gather_p_exec: input has " + std::to_string(input.numel()) + " elements; " +
                      std::to_string(c.size()) + " ranks need " + std::to_string(need) +
                      " elements of the output, which has " + std::to_string(h.output.numel()));
    at::Tensor in = input.contiguous();
    Buf b = dataBuf(in, "all_gather_p_exec");
    Buf ob = dataBuf(h.output, "all_gather_p_exec");
    tcx::AllGatherPExecOptions o = options;
    if (o.hints.empty()) o.hints = h.hints;
    if (o.timeout.count() <= 0) o.timeout = h.timeout;
    Staging s(device_);
    CollOptions co = callOpts(async_op, o, s);
    return done(async_op, c.allGather(b.ptr, ob.ptr, b.count, b.dtype, co), {in, h.output},
                co.timeout, s);
  });
}

void CclxBackend::all_gather_p_free(AllGatherPHandle handle) {
  guarded("all_gather_p_free", [&] {
    if (persistent_.erase(handle) == 0)
      throw Error(cclxInvalidArgument,
                  "all_gather_p_free: not a live handle of this communicator (freed already?)");
  });
}

WorkPtr CclxBackend::device_alltoallv_single(at::Tensor& output, const at::Tensor& input,
                                             const at::Tensor& output_split_sizes,
                                             const at::Tensor& input_split_sizes, bool async_op,
                                             const tcx::AllToAllvSingleOptions& options) {
  return guarded("device_alltoallv_single", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "device_alltoallv_single", traceRank(), input,
                            output);
    Comm& c = comm("device_alltoallv_single");
    requireOnDevice(input, device_, "device_alltoallv_single: input");
    requireOnDevice(output, device_, "device_alltoallv_single: output");
    for (const at::Tensor* t : {&output_split_sizes, &input_split_sizes}) {
      const char* what = t == &input_split_sizes ? "device_alltoallv_single: input_split_sizes"
                                                 : "device_alltoallv_single: output_split_sizes";
      requireOnDevice(*t, device_, what);
      requireType(*t, at::kLong, what);
      if (t->numel() != c.size())
        throw Error(cclxInvalidArgument, std::string(what) + ": " +
                                             std::to_string(t->numel()) + " entries for " +
                                             std::to_string(c.size()) + " ranks");
    }
    if (input.scalar_type() != output.scalar_type())
      throw Error(cclxInvalidArgument, "device_alltoallv_single: output dtype " +
                                           std::string(c10::toString(output.scalar_type())) +
                                           " differs from the input's " +
                                           std::string(c10::toString(input.scalar_type())));
    // Rows of dim 0: the elements of one row are the same on both sides.
    auto rowElems = [](const at::Tensor& t) -> size_t {
      if (t.dim() == 0) return 1;
      int64_t n = 1;
      for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
      return size_t(n);
    };
    const size_t row = rowElems(input);
    if (rowElems(output) != row)
      throw Error(cclxInvalidArgument,
                  "device_alltoallv_single: input rows of " + std::to_string(row) +
                      " elements, output rows of " + std::to_string(rowElems(output)));
    Buf b = dataBuf(input, "device_alltoallv_single");
    Buf ob = dataBuf(output, "device_alltoallv_single");
    const size_t scale = elementScale(size_t(input.element_size()), b.dtype);  // complex: 2
    const size_t inRows = input.dim() == 0 ? 1 : size_t(input.size(0));
    const size_t outRows = output.dim() == 0 ? 1 : size_t(output.size(0));
    Staging s(device_);
    CollOptions co = callOpts(async_op, options, s);
    return done(async_op,
                c.allToAllVDevice(b.ptr, ob.ptr, input_split_sizes.data_ptr<int64_t>(),
                                  output_split_sizes.data_ptr<int64_t>(),
                                  row * scale, b.dtype, inRows, outRows, co),
                {input, output, input_split_sizes, output_split_sizes}, co.timeout, s);
  });
}

WorkPtr CclxBackend::reduce_scatter_quantized(at::Tensor& output, const at::Tensor& input,
                                              const tcx::ReduceOp& op, const at::Tensor& seed,
                                              bool async_op,
                                              const tcx::ReduceScatterSingleOptions& options) {
  return guarded("reduce_scatter_quantized", [&] {
    tcx::TracingGuard trace(name_, traceSize(), "reduce_scatter_quantized", traceRank(), input,
                            output);
    Comm& c = comm("reduce_scatter_quantized");
    requireOnDevice(input, device_, "reduce_scatter_quantized: input");
    requireOnDevice(output, device_, "reduce_scatter_quantized: output");
    requireOnDevice(seed, device_, "reduce_scatter_quantized: seed");
    requireType(input, at::kFloat, "reduce_scatter_quantized: input");
    requireType(output, at::kFloat, "reduce_scatter_quantized: output");
    requireType(seed, at::kLong, "reduce_scatter_quantized: seed");
    if (seed.numel() != 1)
      throw Error(cclxInvalidArgument, "reduce_scatter_quantized: seed has " +
                                           std::to_string(seed.numel()) +
                                           " elements, expected 1");
    if (input.numel() != output.numel() * c.size())
      throw Error(cclxInvalidArgument,
                  "reduce_scatter_quantized: input has " + std::to_string(input.numel()) +
                      " elements, expected " + std::to_string(output.numel() * c.size()));
    Staging s(device_);
    CollOptions co = callOpts(async_op, options, s);
    return done(async_op,
                c.reduceScatterQuantized(input.data_ptr<float>(), output.data_ptr<float>(),
                                         size_t(output.numel()), reduceOp(op),
                                         seed.data_ptr<int64_t>(), co),
                {input, output, seed}, co.timeout, s);
  });
}

}  // namespace cclx::tc
