// Window: one-sided put / signal / wait_signal (cclx::Window), and shared host memory for the
// windows of CPU comms. Argument errors raise before anything is enqueued; calls release the GIL.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <cclx/device_window.h>

#include <cstdint>
#include <memory>
#include <string>

namespace cclx::py {

void bindWindow(nb::module_& m, CommClass& c) {
  nb::enum_<WinAccess>(m, "WinAccess", "Whether a peer's window memory is directly addressable.")
      .value("UNIFIED", WinAccess::Unified)
      .value("SEPARATE", WinAccess::Separate);

  auto win = nb::class_<Window>(m, "Window",
                                "A one-sided window (low level; see cclx.Comm.new_window).");
  win.def(
          "register",
          [](Window& w, const Array& a, int dtc) {
            const char* n = "tensor_register";
            DataType t = resolveDtype(dtc, a, n);
            View v = viewOf(a, msg(n, "tensor").c_str(), t, *w.comm());
            nb::gil_scoped_release nogil;
            w.registerBuffer(v.ptr, v.numel, t);
          },
          nb::arg("tensor"), nb::arg("dtype"), "Collective: registers the tensor's memory.")
      .def(
          "deregister",
          [](Window& w) {
            nb::gil_scoped_release nogil;
            w.deregisterBuffer();
          },
          "Collective: every rank done, then the peers' memory is unmapped.");
  defColl(
      win, "put", "put", kCollDoc,
      [](const char* n, Window& w, const Array& a, int dtc, int dst, int64_t offset) {
        DataType t = resolveDtype(dtc, a, n);
        if (w.registered() && t != w.dtype()) {
          argError(std::string(n) + ": tensor dtype " + dtypeName(t) +
                   " differs from the window's " + dtypeName(w.dtype()));
        }
        checkRank(n, "dst_rank", dst, *w.comm());
        if (offset < 0) argError("put: target_offset_nelems must be >= 0");
        View v = viewOf(a, msg(n, "tensor").c_str(), t, *w.comm());
        return deferCall(&Window::put, w, v.ptr, v.numel, dst, static_cast<size_t>(offset));
      },
      nb::arg("tensor"), nb::arg("dtype"), nb::arg("dst"), nb::arg("offset"));
  // signal and wait_signal: the counter of one peer.
  auto bindSignal = [&](const char* name, const char* peerArg,
                        std::shared_ptr<Work> (Window::*call)(int, const CollOptions&)) {
    defColl(
        win, name, name, kCollDoc,
        [call](const char* n, Window& w, int peer) {
          checkRank(n, "peer_rank", peer, *w.comm());
          return deferCall(call, w, peer);
        },
        nb::arg(peerArg));
  };
  bindSignal("signal", "dst", &Window::signal);
  bindSignal("wait_signal", "src", &Window::waitSignal);
  win.def(
          "remote_ptr",
          [](Window& w, int rank) {
            checkRank("map_remote_tensor", "rank", rank, *w.comm());
            return reinterpret_cast<uintptr_t>(w.remotePtr(rank));
          },
          nb::arg("rank"), "Address of rank's window in this process (raises when not direct).")
      .def(
          "remote_view",
          [](nb::handle self, int rank, bool torch, int devId) -> nb::object {
            Window& w = nb::cast<Window&>(self);
            checkRank("map_remote_tensor", "rank", rank, *w.comm());
            void* p = w.remotePtr(rank);
            size_t shape[1] = {w.count() * dtypeSize(w.dtype())};
            const DeviceSpec d = w.comm()->device();
            // The memory as this rank's device addresses it (a peer's mapping reports the peer's
            // GPU to the runtime; the view belongs to this rank's device, as torchcomms' does).
            const int32_t devType = d.type == DeviceSpec::CPU ? nb::device::cpu::value
                                                             : nb::device::cuda::value;
            if (d.type == DeviceSpec::CPU) devId = 0;
            if (torch)
              return nb::cast(nb::ndarray<nb::pytorch, uint8_t, nb::ndim<1>>(
                  p, 1, shape, self, nullptr, nb::dtype<uint8_t>(), devType, devId));
            if (d.type != DeviceSpec::CPU) argError("map_remote_tensor: CUDA views need torch");
            return nb::cast(nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(p, 1, shape, self));
          },
          nb::arg("rank"), nb::arg("torch"), nb::arg("device_index"),
          "Rank's window as a uint8 tensor (torch) or array (numpy) of device device_index; it "
          "keeps the window alive and is invalid after deregistration.")
      .def(
          "access",
          [](Window& w, int peer) {
            checkRank("get_attr", "peer_rank", peer, *w.comm());
            return w.access(peer);
          },
          nb::arg("peer"))
      .def(
          "device_window",
          [](Window& w, int signals, int counters, int barriers) {
            nb::gil_scoped_release nogil;
            return reinterpret_cast<uintptr_t>(w.deviceWindow(signals, counters, barriers));
          },
          nb::arg("signal_count"), nb::arg("counter_count"), nb::arg("barrier_count"),
          "Collective on the first call: the address of the window's device handle.")
      .def(
          "device_window_info",
          [](const Window& w) {
            const DeviceWindowHandle& h = w.deviceWindowHandle();
            const DeviceWindowComm& c = h.comm;
            nb::dict d;
            nb::list res, peers;
            for (int r = 0; r < c.size; ++r) {
              res.append(reinterpret_cast<uintptr_t>(c.res[r]));
              peers.append(reinterpret_cast<uintptr_t>(h.window.base[r]));
            }
            d["rank"] = h.rank;
            d["num_ranks"] = h.numRanks;
            d["base"] = reinterpret_cast<uintptr_t>(h.base);
            d["size"] = h.size;
            d["signal_count"] = c.signalCount;
            d["counter_count"] = c.counterCount;
            d["barrier_count"] = c.barrierCount;
            d["signal_offset"] = c.signalOffset;
            d["barrier_offset"] = c.barrierOffset;
            d["counter_offset"] = c.counterOffset;
            d["timeout_ms"] = c.timeoutMs;
            d["resources"] = res;
            d["peers"] = peers;
            d["handle_bytes"] = sizeof(DeviceWindowHandle);
            return d;
          },
          "The device handle as the host built it (a dict of its fields).")
      .def_prop_ro("registered", &Window::registered)
      .def_prop_ro("count", &Window::count)
      .def_prop_ro("dtype", &Window::dtype)
      .def_prop_ro("transport", &Window::transport);

  c.def(
      "new_window",
      [](Comm& c) {
        nb::gil_scoped_release nogil;
        return c.newWindow();
      },
      "Collective: a new one-sided window with nothing registered.");

  m.def(
      "alloc_shared",
      [](size_t nbytes) {
        void* p = allocShared(nbytes);
        nb::capsule owner(p, [](void* q) noexcept {
          try {
            freeShared(q);
          } catch (...) {
          }
        });
        size_t shape[1] = {nbytes};
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(p, 1, shape, owner);
      },
      nb::arg("nbytes"),
      "A uint8 numpy array of `nbytes` in a new shared-memory file (zeroed), freed with it.");
}

}  // namespace cclx::py
