// CclxBackend: torchcomms' C++ TorchCommBackend over one cclx::Comm (CPU or CUDA). torchcomms
// creates it through create_dynamic_loader_cclx (loader.cc) and calls init(); split() makes more.
// Every method runs inside guarded() (convert.h): nothing but std::runtime_error leaves it.
#pragma once

#include "torchcomms/convert.h"

#include <map>
#include <memory>
#include <string>
#include <unordered_map>

namespace cclx::tc {

class Staging;

/// One all_gather_p_init handle (ext/methods.cc): the output, kept referenced, and the defaults
/// of its executions.
struct PersistentAllGather {
  at::Tensor output;
  std::unordered_map<std::string, std::string> hints;
  std::chrono::milliseconds timeout{0};
};

using tcx::TorchWork;
using WorkPtr = c10::intrusive_ptr<TorchWork>;
using TensorList = std::vector<at::Tensor>;

// Exported (default visibility), with its type information: the Python module _cclx_torchcomms
// (ext/module.cc) binds its methods, and pybind11 finds its type behind get_backend_impl().
class __attribute__((visibility("default"))) CclxBackend : public tcx::TorchCommBackend {
 public:
  CclxBackend() = default;
  ~CclxBackend() override;

  void init(at::Device device, const std::string& name, const tcx::CommOptions& options) override;
  void finalize() override;
  int getRank() const override;
  int getSize() const override;
  std::string_view getBackendName() const override { return "cclx"; }
  std::string_view getBackendVersion() const override;
  std::string_view getCommName() const override { return name_; }

  WorkPtr send(const at::Tensor& tensor, int dst, bool async_op,
               const tcx::SendOptions& options) override;
  WorkPtr recv(at::Tensor& tensor, int src, bool async_op,
               const tcx::RecvOptions& options) override;
  WorkPtr batch_op_issue(const std::vector<tcx::BatchSendRecv::P2POp>& ops, bool async_op,
                         const tcx::BatchP2POptions& options) override;

  WorkPtr broadcast(at::Tensor& tensor, int root, bool async_op,
                    const tcx::BroadcastOptions& options) override;
  WorkPtr all_reduce(at::Tensor& tensor, const tcx::ReduceOp& op, bool async_op,
                     const tcx::AllReduceOptions& options) override;
  WorkPtr reduce(const at::Tensor& tensor, int root, const tcx::ReduceOp& op, bool async_op,
                 const tcx::ReduceOptions& options) override;
  WorkPtr all_gather(const TensorList& tensor_list, const at::Tensor& tensor, bool async_op,
                     const tcx::AllGatherOptions& options) override;
  WorkPtr all_gather_v(const TensorList& tensor_list, const at::Tensor& tensor, bool async_op,
                       const tcx::AllGatherOptions& options) override;
  WorkPtr all_gather_single(at::Tensor& output, const at::Tensor& input, bool async_op,
                            const tcx::AllGatherSingleOptions& options) override;
  WorkPtr reduce_scatter(at::Tensor& output, const TensorList& input_list,
                         const tcx::ReduceOp& op, bool async_op,
                         const tcx::ReduceScatterOptions& options) override;
  WorkPtr reduce_scatter_v(at::Tensor& output, const TensorList& input_list,
                           const tcx::ReduceOp& op, bool async_op,
                           const tcx::ReduceScatterOptions& options) override;
  WorkPtr reduce_scatter_single(at::Tensor& output, const at::Tensor& input,
                                const tcx::ReduceOp& op, bool async_op,
                                const tcx::ReduceScatterSingleOptions& options) override;
  WorkPtr all_to_all_single(at::Tensor& output, const at::Tensor& input, bool async_op,
                            const tcx::AllToAllSingleOptions& options) override;
  WorkPtr all_to_all_v_single(at::Tensor& output, const at::Tensor& input,
                              const std::vector<uint64_t>& output_split_sizes,
                              const std::vector<uint64_t>& input_split_sizes, bool async_op,
                              const tcx::AllToAllvSingleOptions& options) override;
  WorkPtr all_to_all(const TensorList& output_tensor_list, const TensorList& input_tensor_list,
                     bool async_op, const tcx::AllToAllOptions& options) override;
  WorkPtr barrier(bool async_op, const tcx::BarrierOptions& options) override;
  WorkPtr scatter(at::Tensor& output_tensor, const TensorList& input_tensor_list, int root,
                  bool async_op, const tcx::ScatterOptions& options) override;
  WorkPtr gather(const TensorList& output_tensor_list, const at::Tensor& input_tensor, int root,
                 bool async_op, const tcx::GatherOptions& options) override;
  WorkPtr gather_single(at::Tensor& output, const at::Tensor& input, int root, bool async_op,
                        const tcx::GatherSingleOptions& options) override;

  std::shared_ptr<tcx::TorchCommBackend> split(const std::vector<int>& ranks,
                                               const std::string& name,
                                               const tcx::CommOptions& options) override;
  const tcx::CommOptions& getOptions() const override { return options_; }
  const at::Device& getDevice() const override { return device_; }

  bool isAbortSupported() const override { return true; }
  bool isAborted() const override;
  void abort() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setHints(std::unordered_map<std::string, std::string> hints) override;
  void registerAbortHook(int64_t hookId, tcx::AbortHook hook) override;
  void unregisterAbortHook(int64_t hookId) override;
  void tensor_register(const at::Tensor& tensor) override;
  void tensor_deregister(const at::Tensor& tensor) override;

  /// One-sided windows (window.h): collective over the comm; `tensor` registered when given.
  bool supportsWindow() const override { return true; }
  std::shared_ptr<tcx::TorchCommWindow> new_window(
      const std::optional<at::Tensor>& tensor = std::nullopt) override;

  /// Persistent all-gather (ext/methods.cc): init checks the output once and keeps it; each exec
  /// fills its first size() x input's elements with every rank's input in rank order (an
  /// all-gather underneath); free ends the handle. An unknown or freed handle is an error.
  AllGatherPHandle all_gather_p_init(at::Tensor& output,
                                     const tcx::AllGatherPInitOptions& options = {}) override;
  WorkPtr all_gather_p_exec(AllGatherPHandle handle, const at::Tensor& input, bool async_op,
                            const tcx::AllGatherPExecOptions& options = {}) override;
  void all_gather_p_free(AllGatherPHandle handle) override;

  // NCCLX's backend-specific methods (ext/methods.cc), reached from Python through
  // torchcomm.get_backend_impl() once cclx.torchcomms_backend imported _cclx_torchcomms.
  /// Comm::dump() as a map (NCCLX's comm_dump returns dict[str, str]).
  std::unordered_map<std::string, std::string> comm_dump();
  /// NCCLX's set_config: sets the named cclx hints (`cclx::KEY` / `cclx.KEY` too) and keeps the
  /// others (Comm::updateHints); an unknown key or value throws and changes nothing.
  void set_config(const std::unordered_map<std::string, std::string>& hints);
  /// All-to-all-v whose split sizes (int64, rows of dim 0, one per rank) are tensors on the
  /// comm's device: Comm::allToAllVDevice.
  WorkPtr device_alltoallv_single(at::Tensor& output, const at::Tensor& input,
                                  const at::Tensor& output_split_sizes,
                                  const at::Tensor& input_split_sizes, bool async_op,
                                  const tcx::AllToAllvSingleOptions& options = {});
  /// f32 reduce-scatter with bf16 stochastically rounded transport (seed: one int64 on the
  /// comm's device): Comm::reduceScatterQuantized.
  WorkPtr reduce_scatter_quantized(at::Tensor& output, const at::Tensor& input,
                                   const tcx::ReduceOp& op, const at::Tensor& seed,
                                   bool async_op,
                                   const tcx::ReduceScatterSingleOptions& options = {});

  bool supportsReconfigure() const override { return true; }
  bool isInitialized() const override { return comm_ != nullptr; }
  tcx::InitHandle getInitHandle() const override;
  WorkPtr reconfigure(const tcx::ReconfigureOptions& opts) override;

 private:
  Comm& comm(const char* what) const;
  /// Per-call options: async on CUDA comms, the caller's current stream, timeout and hints.
  /// A call with a staged tensor (staging.h) runs asynchronously on the comm's stream and
  /// done() waits for it on the host.
  template <typename O>
  CollOptions callOpts(bool async_op, const O& o, const Staging& s) const;
  WorkPtr done(bool async_op, std::shared_ptr<Work> w, TensorList keep,
               std::chrono::milliseconds timeout, Staging& s) const;
  void adopt(std::shared_ptr<Comm> c, const at::Device& dev, const std::string& name,
             const tcx::CommOptions& options);
  /// The profiler events' group size and rank (0 / -1 before init).
  int traceSize() const { return comm_ ? comm_->size() : 0; }
  int traceRank() const { return comm_ ? comm_->rank() : -1; }

  std::shared_ptr<Comm> comm_;
  at::Device device_{at::kCPU};
  std::string name_;
  tcx::CommOptions options_;
  mutable std::string version_;
  std::map<int64_t, int> abortHandles_;  // torchcomms' hook id -> cclx's
  int reconfigured_ = 0;                 // reconfigure() calls so far (the store namespace)
  std::string initHandle_;
  std::map<const void*, std::unique_ptr<PersistentAllGather>> persistent_;  // live handles
};

}  // namespace cclx::tc
