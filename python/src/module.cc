// cclx._C: nanobind bindings of the cclx C++ API. The Python package (python/cclx) builds the
// torchcomms-style API on top of these.
#include "bindings.h"

#include <cclx/cclx.h>
#include <cclx/nccl_info.h>
#include <dlfcn.h>

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>


#ifndef CCLX_GIT_COMMIT
#define CCLX_GIT_COMMIT "unknown"
#endif

NB_MODULE(_C, m) {
  using namespace cclx::py;
  m.doc() = "Low-level bindings of the cclx C++ API (use the cclx package instead).";
  nb::set_leak_warnings(false);
  m.attr("__version__") = std::to_string(CCLX_MAJOR) + "." + std::to_string(CCLX_MINOR) + "." +
                          std::to_string(CCLX_PATCH);
  m.attr("__commit__") = CCLX_GIT_COMMIT;
#ifdef CCLX_HAVE_CUDA
  m.attr("has_cuda") = true;
#else
  m.attr("has_cuda") = false;
#endif
  m.def(
      "nccl_version",
      []() -> nb::object {
        int v = cclx::ncclRuntimeVersion();
        if (v <= 0) return nb::none();
        return nb::make_tuple(v / 10000, (v / 100) % 100, v % 100);
      },
      "(major, minor, patch) of the NCCL library cclx loads (loading it if needed), or None.");
  m.def(
      "library_path",
      [] {
        Dl_info info{};
        if (!dladdr(reinterpret_cast<void*>(&cclxTorchAlloc), &info) || !info.dli_fname)
          throw std::runtime_error("cannot find the file libcclx was loaded from");
        return std::string(info.dli_fname);
      },
      "File libcclx was loaded from (holds cclxTorchAlloc / cclxTorchFree).");
  m.def("nccl_path", &cclx::ncclRuntimePath, "File the NCCL library was loaded from ('' if none).");
  m.def(
      "default_timeout", []() { return double(cclx::defaultTimeout().count()) / 1000.0; },
      "Seconds of a comm's timeout when none is given (CCLX_TIMEOUT_MS, CCLX_TIMEOUT, "
      "TORCHCOMM_TIMEOUT_SECONDS, else 600; very large for no timeout).");
  m.def(
      "hint_keys", [] { return cclx::hintKeys(); },
      "Every hint key cclx knows (Options / call hints), from its table of settings and hints "
      "(docs/SETTINGS.md).");
  m.def(
      "hint_values",
      [](const std::string& key) { return cclx::hintValues(key); },
      nb::arg("key"), "The values hint `key` takes, from the same table.");
  bindErrors(m);
  bindTypes(m);
  bindStore(m);
  bindComm(m);
  bindRendezvous(m);
  bindMoe(m);
}
