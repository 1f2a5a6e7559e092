// The Python module cclx._cclx_torchcomms (built with libcclx_torchcomms.so; it links it): binds
// the C++ CclxBackend as a pybind11 subclass of torchcomms' TorchCommBackend, so that
// torchcomm.get_backend_impl() of a cclx comm on the C++ route is a CclxBackend with NCCLX's
// backend-specific methods (comm_dump, device_alltoallv_single, reduce_scatter_quantized).
// cclx.torchcomms_backend imports it when it takes the C++ route. It also gives the Python route
// torchcomms' profiler events (trace(): a TracingGuard held by a Python context manager).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <comms/torchcomms/utils/TracingGuard.hpp>

#include <optional>

#include "torchcomms/backend.h"

namespace py = pybind11;
namespace tcx = torch::comms;
using cclx::tc::CclxBackend;

namespace {

/// Per-call options from the keyword arguments (hints, a timeout as timedelta).
template <typename O>
O options(const std::optional<std::unordered_map<std::string, std::string>>& hints,
          const std::optional<std::chrono::milliseconds>& timeout) {
  O o;
  if (hints) o.hints = *hints;
  if (timeout) o.timeout = *timeout;
  return o;
}

/// torchcomms' profiler event around a block of Python code: the guard lives from __enter__ to
/// __exit__ (record_param_comms with the collective's name, group, sizes and dtype).
class Trace {
 public:
  Trace(std::string comm, int size, std::string name, int rank, std::vector<at::Tensor> in,
        std::vector<at::Tensor> out)
      : comm_(std::move(comm)), name_(std::move(name)), size_(size), rank_(rank),
        in_(std::move(in)), out_(std::move(out)) {}
  void enter() { guard_.emplace(comm_, size_, name_, rank_, in_, out_); }
  void exit() { guard_.reset(); }

 private:
  std::string comm_, name_;
  int size_, rank_;
  std::vector<at::Tensor> in_, out_;
  std::optional<tcx::TracingGuard> guard_;
};

}  // namespace

PYBIND11_MODULE(_cclx_torchcomms, m) {
  m.doc() = "cclx's C++ torchcomms backend (CclxBackend) and its backend-specific methods";
  py::module_::import("torchcomms");  // registers TorchCommBackend, the base class

  py::class_<CclxBackend, tcx::TorchCommBackend, std::shared_ptr<CclxBackend>>(m, "CclxBackend")
      .def("comm_dump", &CclxBackend::comm_dump,
           "The communicator's state for hang debugging, dict[str, str] (cclx's Comm::dump: "
           "counts, in-flight operations, last operations, failure, algorithms).",
           py::call_guard<py::gil_scoped_release>())
      .def("set_config", &CclxBackend::set_config, py::arg("hints"),
           "NCCLX's set_config: sets the named cclx hints and keeps the others; an unknown key "
           "or value raises RuntimeError and changes nothing.")
      .def(
          "device_alltoallv_single",
          [](CclxBackend& self, at::Tensor& output, const at::Tensor& input,
             const at::Tensor& output_split_sizes, const at::Tensor& input_split_sizes,
             bool async_op, std::optional<std::unordered_map<std::string, std::string>> hints,
             std::optional<std::chrono::milliseconds> timeout) {
            return self.device_alltoallv_single(
                output, input, output_split_sizes, input_split_sizes, async_op,
                options<tcx::AllToAllvSingleOptions>(hints, timeout));
          },
          "All-to-all-v whose split sizes (int64 rows of dim 0, one per rank) are tensors on "
          "the communicator's device; no host synchronization.",
          py::arg("output"), py::arg("input"), py::arg("output_split_sizes"),
          py::arg("input_split_sizes"), py::arg("async_op") = false,
          py::arg("hints") = py::none(), py::arg("timeout") = py::none(),
          py::call_guard<py::gil_scoped_release>())
      .def(
          "reduce_scatter_quantized",
          [](CclxBackend& self, at::Tensor& output, const at::Tensor& input,
             const tcx::ReduceOp& op, const at::Tensor& seed, bool async_op,
             std::optional<std::unordered_map<std::string, std::string>> hints,
             std::optional<std::chrono::milliseconds> timeout) {
            return self.reduce_scatter_quantized(
                output, input, op, seed, async_op,
                options<tcx::ReduceScatterSingleOptions>(hints, timeout));
          },
          "f32 reduce-scatter whose contributions travel as bf16 rounded stochastically from "
          "`seed` (one int64 on the device); op SUM or AVG.",
          py::arg("output"), py::arg("input"), py::arg("op"), py::arg("seed"),
          py::arg("async_op") = false, py::arg("hints") = py::none(),
          py::arg("timeout") = py::none(), py::call_guard<py::gil_scoped_release>());

  py::class_<Trace>(m, "_Trace")
      .def("__enter__", [](Trace& t) { t.enter(); return &t; },
           py::return_value_policy::reference)
      .def("__exit__", [](Trace& t, py::args) { t.exit(); });
  m.def(
      "trace",
      [](std::string comm, int size, std::string name, int rank, std::vector<at::Tensor> in,
         std::vector<at::Tensor> out) {
        return std::make_unique<Trace>(std::move(comm), size, std::move(name), rank,
                                       std::move(in), std::move(out));
      },
      "A context manager emitting torchcomms' profiler event (record_param_comms) for one "
      "operation of communicator `comm`.",
      py::arg("comm"), py::arg("size"), py::arg("name"), py::arg("rank"), py::arg("inputs"),
      py::arg("outputs"));
}
