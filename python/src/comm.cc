// Comm: creation, properties, split and shutdown, plus the argument conversions and checks the
// collectives share (comm_reduce.cc, comm_data.cc, comm_grouped.cc, comm_fused.cc, window.cc).
// Every collective takes validated array views, builds CollOptions and calls the C++ API with the
// GIL released (defColl in bindings.h). Argument errors raise before anything is enqueued.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cclx::py {

std::chrono::milliseconds msOf(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0) argError(std::string(what) + " must be >= 0 seconds");
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

std::chrono::milliseconds timeoutOf(double seconds, const char* what) {
  if (seconds >= double(kInfiniteTimeout.count()) / 1000.0) return kInfiniteTimeout;
  return msOf(seconds, what);
}

Options commOptions(const std::string& name, const std::string& backend, double timeout,
                    const char* timeoutWhat, const Hints& hints, int abortOnError) {
  Options o;
  o.timeout = timeoutOf(timeout, timeoutWhat);
  if (abortOnError >= 0) o.abortOnError = abortOnError != 0;
  o.name = name;
  o.backend = backend;
  o.hints = hints;
  return o;
}

DeviceSpec deviceOf(const char* op, int devType, int devIndex) {
  if (devType != DeviceSpec::CPU && devType != DeviceSpec::CUDA)
    argError(std::string(op) + ": device type must be 0 (cpu) or 1 (cuda)");
  return DeviceSpec{static_cast<DeviceSpec::Type>(devType), devIndex};
}

CollOptions collOpts(bool async, uintptr_t stream, const Hints& hints, double timeout) {
  CollOptions o;
  o.async = async;
  o.stream = reinterpret_cast<void*>(stream);
  o.timeout = msOf(timeout, "timeout");
  o.hints = hints;
  return o;
}

DataType checkedDtype(int code, const char* op) {
  if (code < 0 || code >= cclxNumTypes) argError(std::string(op) + ": invalid dtype code");
  return static_cast<DataType>(code);
}

DataType resolveDtype(int code, const Array& first, const char* op) {
  if (code < 0) return dtypeOf(first, -1, op);
  return checkedDtype(code, op);
}

void checkOp(const char* op, const ReduceOp& r, DataType t) {
  if (!opSupported(r.kind, t)) {
    argError(std::string(op) + ": ReduceOp." + redOpName(r.kind) + " is not supported for dtype " +
             dtypeName(t));
  }
}

void checkRank(const char* op, const char* what, int r, const Comm& c) {
  if (r < 0 || r >= c.size()) {
    argError(std::string(op) + ": " + what + " " + std::to_string(r) + " is out of range [0, " +
             std::to_string(c.size()) + ")");
  }
}

DataType reductionDtype(int code, const Array& first, const char* op, const ReduceOp& r) {
  const DataType t = resolveDtype(code, first, op);
  checkOp(op, r, t);
  return t;
}

DataType rootedDtype(int code, const Array& first, const char* op, int root, const Comm& c) {
  const DataType t = resolveDtype(code, first, op);
  checkRank(op, "root", root, c);
  return t;
}

void checkNumel(const char* op, const char* what, size_t got, size_t want) {
  if (got != want) {
    argError(std::string(op) + ": " + what + " has " + std::to_string(got) +
             " elements, expected " + std::to_string(want));
  }
}

std::string msg(const char* op, const char* arg) { return std::string(op) + ": " + arg; }

void checkLength(const char* op, const char* what, size_t got, const Comm& c) {
  checkNumel(op, (std::string(what) + " (length)").c_str(), got, static_cast<size_t>(c.size()));
}

void checkDivisible(const char* op, size_t numel, const Comm& c) {
  if (numel % c.size() != 0) {
    argError(std::string(op) + ": input has " + std::to_string(numel) +
             " elements, not a multiple of the communicator size " + std::to_string(c.size()));
  }
}

InOut inOrInPlace(const char* op, const Array& send, const std::optional<Array>& recv, DataType t,
                  const Comm& c) {
  InOut io;
  io.in = viewOf(send, msg(op, "tensor").c_str(), t, c);
  io.out = recv ? viewOf(*recv, msg(op, "output").c_str(), t, c) : io.in;
  checkNumel(op, "output", io.out.numel, io.in.numel);
  return io;
}

InOut inputOutput(const char* op, const Array& send, const Array& recv, DataType t, const Comm& c) {
  InOut io;
  io.in = viewOf(send, msg(op, "input").c_str(), t, c);
  io.out = viewOf(recv, msg(op, "output").c_str(), t, c);
  return io;
}

void bindComm(nb::module_& m) {
  bindWork(m);

  auto c = CommClass(m, "Comm", "A cclx communicator (low level; see cclx.new_comm).");

  c.def_static(
      "create",
      [](int devType, int devIndex, const std::string& name, const std::string& backend,
         double timeout, const Hints& hints, std::shared_ptr<Store> store, int rank, int size,
         int abortOnError) {
        if (!store) argError("Comm.create: store must not be None");
        if (size < 1 || rank < 0 || rank >= size) {
          argError("Comm.create: need 0 <= rank < size (got rank " + std::to_string(rank) +
                   ", size " + std::to_string(size) + ")");
        }
        const DeviceSpec d = deviceOf("Comm.create", devType, devIndex);
        const Options o =
            commOptions(name, backend, timeout, "Comm.create: timeout", hints, abortOnError);
        nb::gil_scoped_release nogil;
        return Comm::create(d, o, std::move(store), rank, size);
      },
      nb::arg("device_type"), nb::arg("device_index"), nb::arg("name"), nb::arg("backend"),
      nb::arg("timeout"), nb::arg("hints"), nb::arg("store"), nb::arg("rank"), nb::arg("size"),
      nb::arg("abort_on_error") = -1,
      "Collective over all ranks: rendezvous through `store` (timeout in seconds, 0 = the "
      "default; abort_on_error -1 = the default, CCLX_ABORT_ON_ERROR / TORCHCOMM_ABORT_ON_ERROR, "
      "else on).");

  c.def_prop_ro("rank", &Comm::rank)
      .def_prop_ro("size", &Comm::size)
      .def_prop_ro("local_rank", &Comm::localRank)
      .def_prop_ro("local_size", &Comm::localSize)
      .def_prop_ro("name", &Comm::name)
      .def_prop_ro("backend", &Comm::backendName)
      .def_prop_ro("device_type", [](const Comm& c) { return static_cast<int>(c.device().type); })
      .def_prop_ro("device_index", [](const Comm& c) { return c.device().index; })
      .def_prop_ro("timeout", [](const Comm& c) { return c.options().timeout.count() / 1000.0; })
      .def_prop_ro("hints", [](const Comm& c) { return c.options().hints; })
      .def_prop_ro("abort_on_error", &Comm::abortOnError)
      .def("is_aborted", &Comm::isAborted, "True after abort() on this rank.")
      .def(
          "add_abort_hook",
          [](Comm& c, nb::callable cb) {
            // The hook may run on the watchdog's thread: it takes the GIL, and so does the
            // release of the callable.
            std::shared_ptr<nb::object> fn(new nb::object(cb), [](nb::object* o) {
              nb::gil_scoped_acquire gil;
              delete o;
            });
            return c.addAbortHook([fn](const std::string& reason) {
              nb::gil_scoped_acquire gil;
              try {
                (*fn)(reason);
              } catch (nb::python_error& e) {
                e.discard_as_unraisable("cclx abort hook");
              }
            });
          },
          nb::arg("hook"), "Calls hook(reason) when the comm aborts; returns a handle.")
      .def("remove_abort_hook", &Comm::removeAbortHook, nb::arg("handle"));

  bindReductions(c);
  bindDataMovement(c);
  bindGrouped(c);
  bindFused(c);
  bindWindow(m, c);

  c.def(
       "split",
       [](Comm& c, const std::vector<int>& ranks, const std::string& name) {
         for (int r : ranks) checkRank("split", "rank", r, c);
         nb::gil_scoped_release nogil;
         return c.split(ranks, name);
       },
       nb::arg("ranks"), nb::arg("name"),
       "Collective: ranks listed get a new Comm (renumbered in list order), others None.")
      .def(
          "finalize",
          [](Comm& c) {
            nb::gil_scoped_release nogil;
            c.finalize();
          },
          "Orderly shutdown after outstanding work completes.")
      .def(
          "abort",
          [](Comm& c) {
            nb::gil_scoped_release nogil;
            c.abort();
          },
          "Abandons outstanding work; later calls raise.")
      .def("async_error", &Comm::asyncError, "First asynchronous error (a cclxResult_t).")
      .def(
          "check_buffer",
          [](Comm& c, const Array& a, int dtc, const std::string& what) {
            return viewOf(a, what.c_str(), resolveDtype(dtc, a, what.c_str()), c).numel;
          },
          nb::arg("array"), nb::arg("dtype"), nb::arg("what"),
          "Checks a buffer as a call of this communicator would (element type, contiguity, "
          "device) and returns its element count; raises CclxInvalidArgument naming `what`.")
      .def_prop_ro("registered_count", &Comm::registeredCount,
                   "Buffers registered with register_memory now.")
      .def(
          "select_all_reduce_algo",
          [](Comm& c, size_t count, int dtc, ReduceOp op, const Hints& hints) {
            CollOptions o;
            o.hints = hints;
            return c.selectAllReduceAlgo(count, checkedDtype(dtc, "select_all_reduce_algo"), op,
                                         o);
          },
          nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("hints"),
          "Name of the algorithm an all_reduce with these arguments would use.");

  // tensor_register / tensor_deregister: the buffer checked as a call checks it; returns its
  // address (the Python side keeps registered tensors alive under it).
  auto bindMemory = [&](const char* name, const char* op, void (Comm::*fn)(void*, size_t),
                        const char* doc) {
    c.def(
        name,
        [op, fn](Comm& c, const Array& a, int dtc) {
          const DataType dt = resolveDtype(dtc, a, op);
          const View v = viewOf(a, "tensor", dt, c);
          nb::gil_scoped_release nogil;
          (c.*fn)(v.ptr, v.numel * dtypeSize(dt));
          return reinterpret_cast<uintptr_t>(v.ptr);
        },
        nb::arg("array"), nb::arg("dtype"), doc);
  };
  bindMemory("register_memory", "tensor_register", &Comm::registerMemory,
             "Local: registers the buffer's memory for zero-copy use (torchcomms' "
             "tensor_register); returns its address.");
  bindMemory("deregister_memory", "tensor_deregister", &Comm::deregisterMemory,
             "Releases a register_memory of the same buffer; returns its address.");
}

}  // namespace cclx::py
