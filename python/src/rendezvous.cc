// What the Python package's new_comm() needs from the C++ rendezvous: the settings it can read
// even when one is malformed, creating a comm in a namespace the package chose, and telling the
// other ranks that this one failed. Warnings go through cclx's logger.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <chrono>
#include <memory>
#include <string>

#include "core/comm/comm_internal.h"
#include "core/settings/config.h"
#include "base/log.h"
#include "store/bootstrap.h"

namespace cclx::py {

void bindRendezvous(nb::module_& m) {
  m.def(
      "_rendezvous_config",
      [](double timeout) {
        RendezvousConfig r = rendezvousConfig();
        Options o;
        o.timeout = timeoutOf(timeout, "timeout");
        return nb::make_tuple(r.jobId, double(creationTimeout(o).count()) / 1000.0, r.error);
      },
      nb::arg("timeout") = 0.0,
      "(job id, the timeout in seconds of a comm created with `timeout` (0: the default), the\n"
      "error of a malformed setting or ''), read even when a setting is malformed.");

  m.def(
      "_launch_env",
      [] {
        const LaunchEnv e = launchEnv();
        return nb::make_tuple(e.rank, e.size, e.masterAddr, e.masterPort, e.torchrun);
      },
      "(rank, size, MASTER_ADDR, MASTER_PORT, under torchrun) by the one rule of cclx::launchEnv\n"
      "(include/cclx/cclx.hpp); a malformed or half-set environment raises CclxInvalidArgument.");

  m.def(
      "_torchcomms_route", [] { return config().torchcommsRoute; },
      "CCLX_TORCHCOMMS_ROUTE: 'auto', 'cxx' or 'python' (python/cclx/torchcomms_backend.py).");

  m.def(
      "_store_token", [] { return rendezvousConfig().storeToken; },
      "CCLX_STORE_TOKEN ('' when unset), read even when another setting is malformed.");

  m.def(
      "_create_comm",
      [](int devType, int devIndex, const std::string& name, const std::string& backend,
         double timeout, const Hints& hints, std::shared_ptr<Store> store, int rank, int size,
         int abortOnError) {
        if (!store) argError("_create_comm: store must not be None");
        const DeviceSpec d = deviceOf("_create_comm", devType, devIndex);
        const Options o = commOptions(name, backend, timeout, "timeout", hints, abortOnError);
        nb::gil_scoped_release nogil;
        return createComm(d, o, std::move(store), "", rank, size);
      },
      nb::arg("device_type"), nb::arg("device_index"), nb::arg("name"), nb::arg("backend"),
      nb::arg("timeout"), nb::arg("hints"), nb::arg("store"), nb::arg("rank"), nb::arg("size"),
      nb::arg("abort_on_error") = -1,
      "Collective: a comm whose keys live in `store` itself (already this comm's namespace). A\n"
      "failure is posted there for the other ranks. timeout and abort_on_error as Comm.create.");

  m.def(
      "_post_failure",
      [](std::shared_ptr<Store> store, int rank, int size, int code, const std::string& message,
         double timeout) {
        if (!store) return;
        Error e(static_cast<cclxResult_t>(code), message);
        auto t = msOf(timeout, "timeout");
        nb::gil_scoped_release nogil;
        postFailure(*store, rank, size, e, t, true);
      },
      nb::arg("store"), nb::arg("rank"), nb::arg("size"), nb::arg("code"), nb::arg("message"),
      nb::arg("timeout"),
      "Tells the other ranks of the comm whose namespace is `store` that this rank failed.");

  m.def(
      "_log_warn", [](const std::string& msg) { CCLX_WARN("%s", msg.c_str()); }, nb::arg("msg"),
      "Writes a WARN line through cclx's logger (CCLX_DEBUG, CCLX_DEBUG_FILE).");
}

}  // namespace cclx::py
