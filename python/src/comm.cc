// Comm and Work. Every collective takes validated array views, builds CollOptions and calls the
// C++ API with the GIL released. Argument errors raise before anything is enqueued.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cclx::py {
namespace {

using Hints = std::map<std::string, std::string>;
using CommPtr = std::shared_ptr<Comm>;
using WorkPtr = std::shared_ptr<Work>;
using std::chrono::milliseconds;

milliseconds msOf(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0) argError(std::string(what) + " must be >= 0 seconds");
  return milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
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

/// The dtype code from Python, or (code < 0) the one DLPack reports for `first`.
DataType resolveDtype(int code, const Array& first, const char* op) {
  if (code < 0) return dtypeOf(first, -1, op);
  return checkedDtype(code, op);
}

void checkOp(const char* op, const ReduceOp& r, DataType t) {
  if (!opSupported(r.kind, t)) {
    static const char* names[] = {"SUM", "PRODUCT", "MIN", "MAX", "AVG",
                                  "BAND", "BOR", "BXOR", "PREMUL_SUM"};
    int k = static_cast<int>(r.kind);
    argError(std::string(op) + ": ReduceOp." + (k >= 0 && k < 9 ? names[k] : "?") +
             " is not supported for dtype " + dtypeName(t));
  }
}

void checkRank(const char* op, const char* what, int r, const Comm& c) {
  if (r < 0 || r >= c.size()) {
    argError(std::string(op) + ": " + what + " " + std::to_string(r) + " is out of range [0, " +
             std::to_string(c.size()) + ")");
  }
}

void checkNumel(const char* op, const char* what, size_t got, size_t want) {
  if (got != want) {
    argError(std::string(op) + ": " + what + " has " + std::to_string(got) +
             " elements, expected " + std::to_string(want));
  }
}

std::string msg(const char* op, const char* arg) { return std::string(op) + ": " + arg; }

}  // namespace

void bindComm(nb::module_& m) {
  nb::class_<Work>(m, "Work", "Handle on a collective in flight.")
      .def(
          "is_completed",
          [](Work& w) {
            nb::gil_scoped_release nogil;
            return w.isCompleted();
          },
          "Non-blocking poll; raises if the operation failed or timed out.")
      .def(
          "wait",
          [](Work& w, uintptr_t stream) {
            nb::gil_scoped_release nogil;
            w.wait(reinterpret_cast<void*>(stream));
          },
          nb::arg("stream") = 0, "CUDA: makes `stream` wait for the operation. CPU: blocks.")
      .def(
          "wait_blocking",
          [](Work& w, double timeout) {
            milliseconds t = msOf(timeout, "wait_blocking: timeout");
            nb::gil_scoped_release nogil;
            w.waitBlocking(t);
          },
          nb::arg("timeout") = 0.0,
          "Blocks until completion; CclxTimeoutError after `timeout` s (0 = comm timeout).");

  auto c = nb::class_<Comm>(m, "Comm", "A cclx communicator (low level; see cclx.new_comm).");

  c.def_static(
      "create",
      [](int devType, int devIndex, const std::string& name, const std::string& backend,
         double timeout, const Hints& hints, std::shared_ptr<Store> store, int rank, int size) {
        if (!store) argError("Comm.create: store must not be None");
        if (size < 1 || rank < 0 || rank >= size) {
          argError("Comm.create: need 0 <= rank < size (got rank " + std::to_string(rank) +
                   ", size " + std::to_string(size) + ")");
        }
        if (devType != DeviceSpec::CPU && devType != DeviceSpec::CUDA) {
          argError("Comm.create: device type must be 0 (cpu) or 1 (cuda)");
        }
        Options o;
        o.timeout = msOf(timeout, "Comm.create: timeout");
        o.name = name;
        o.backend = backend;
        o.hints = hints;
        DeviceSpec d{static_cast<DeviceSpec::Type>(devType), devIndex};
        nb::gil_scoped_release nogil;
        return Comm::create(d, o, std::move(store), rank, size);
      },
      nb::arg("device_type"), nb::arg("device_index"), nb::arg("name"), nb::arg("backend"),
      nb::arg("timeout"), nb::arg("hints"), nb::arg("store"), nb::arg("rank"), nb::arg("size"),
      "Collective over all ranks: rendezvous through `store` (timeout in seconds).");

  c.def_prop_ro("rank", &Comm::rank)
      .def_prop_ro("size", &Comm::size)
      .def_prop_ro("local_rank", &Comm::localRank)
      .def_prop_ro("local_size", &Comm::localSize)
      .def_prop_ro("name", &Comm::name)
      .def_prop_ro("backend", &Comm::backendName)
      .def_prop_ro("device_type", [](const Comm& c) { return static_cast<int>(c.device().type); })
      .def_prop_ro("device_index", [](const Comm& c) { return c.device().index; })
      .def_prop_ro("timeout", [](const Comm& c) { return c.options().timeout.count() / 1000.0; })
      .def_prop_ro("hints", [](const Comm& c) { return c.options().hints; });

  const char* kOpts = "Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.";

  c.def(
      "all_reduce",
      [](Comm& c, const Array& send, std::optional<Array> recv, int dtc, ReduceOp op, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "all_reduce";
        DataType t = resolveDtype(dtc, send, n);
        checkOp(n, op, t);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        View r = recv ? viewOf(*recv, msg(n, "output").c_str(), t, c) : s;
        checkNumel(n, "output", r.numel, s.numel);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allReduce(s.ptr, r.ptr, s.numel, t, op, o);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("op"),
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "reduce",
      [](Comm& c, const Array& send, std::optional<Array> recv, int dtc, ReduceOp op, int root,
         bool async, uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "reduce";
        DataType t = resolveDtype(dtc, send, n);
        checkOp(n, op, t);
        checkRank(n, "root", root, c);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        View r = recv ? viewOf(*recv, msg(n, "output").c_str(), t, c) : s;
        checkNumel(n, "output", r.numel, s.numel);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.reduce(s.ptr, r.ptr, s.numel, t, op, root, o);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("op"), nb::arg("root"),
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "broadcast",
      [](Comm& c, const Array& send, std::optional<Array> recv, int dtc, int root, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "broadcast";
        DataType t = resolveDtype(dtc, send, n);
        checkRank(n, "root", root, c);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        View r = recv ? viewOf(*recv, msg(n, "output").c_str(), t, c) : s;
        checkNumel(n, "output", r.numel, s.numel);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.broadcast(s.ptr, r.ptr, s.numel, t, root, o);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("root"),
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "all_gather",
      [](Comm& c, const Array& send, const Array& recv, int dtc, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "all_gather_single";
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        checkNumel(n, "output", r.numel, s.numel * c.size());
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allGather(s.ptr, r.ptr, s.numel, t, o);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"), nb::arg("async_op"), nb::arg("stream"),
      nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "all_gather_list",
      [](Comm& c, const Array& send, const std::vector<Array>& recvs, int dtc, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "all_gather";
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        checkNumel(n, "tensor_list (length)", recvs.size(), static_cast<size_t>(c.size()));
        std::vector<void*> ptrs;
        for (const Array& a : recvs) {
          View r = viewOf(a, msg(n, "tensor_list entry").c_str(), t, c);
          checkNumel(n, "a tensor_list entry", r.numel, s.numel);
          ptrs.push_back(r.ptr);
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allGatherList(s.ptr, ptrs, s.numel, t, o);
      },
      nb::arg("send"), nb::arg("recvs"), nb::arg("dtype"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "reduce_scatter",
      [](Comm& c, const Array& send, const Array& recv, int dtc, ReduceOp op, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "reduce_scatter_single";
        DataType t = resolveDtype(dtc, send, n);
        checkOp(n, op, t);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        checkNumel(n, "input", s.numel, r.numel * c.size());
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.reduceScatter(s.ptr, r.ptr, r.numel, t, op, o);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "reduce_scatter_list",
      [](Comm& c, const std::vector<Array>& sends, const Array& recv, int dtc, ReduceOp op,
         bool async, uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "reduce_scatter";
        DataType t = resolveDtype(dtc, recv, n);
        checkOp(n, op, t);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        checkNumel(n, "input_list (length)", sends.size(), static_cast<size_t>(c.size()));
        std::vector<const void*> ptrs;
        for (const Array& a : sends) {
          View s = viewOf(a, msg(n, "input_list entry").c_str(), t, c);
          checkNumel(n, "an input_list entry", s.numel, r.numel);
          ptrs.push_back(s.ptr);
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.reduceScatterList(ptrs, r.ptr, r.numel, t, op, o);
      },
      nb::arg("sends"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "all_to_all",
      [](Comm& c, const Array& send, const Array& recv, int dtc, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "all_to_all_single";
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        checkNumel(n, "output", r.numel, s.numel);
        if (s.numel % c.size() != 0) {
          argError(std::string(n) + ": input has " + std::to_string(s.numel) +
                   " elements, not a multiple of the communicator size " +
                   std::to_string(c.size()));
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allToAll(s.ptr, r.ptr, s.numel / c.size(), t, o);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"), nb::arg("async_op"), nb::arg("stream"),
      nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "all_to_all_v",
      [](Comm& c, const Array& send, const Array& recv, const std::vector<size_t>& sendCounts,
         const std::vector<size_t>& recvCounts, int dtc, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "all_to_all_v_single";
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        const size_t np = static_cast<size_t>(c.size());
        checkNumel(n, "input_split_sizes (length)", sendCounts.size(), np);
        checkNumel(n, "output_split_sizes (length)", recvCounts.size(), np);
        size_t st = 0, rt = 0;
        for (size_t i = 0; i < np; ++i) {
          st += sendCounts[i];
          rt += recvCounts[i];
        }
        checkNumel(n, "input (sum of input splits)", s.numel, st);
        checkNumel(n, "output (sum of output splits)", r.numel, rt);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allToAllV(s.ptr, sendCounts, r.ptr, recvCounts, t, o);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("send_counts"), nb::arg("recv_counts"),
      nb::arg("dtype"), nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"),
      nb::arg("timeout"), "Counts in elements. " );

  c.def(
      "send",
      [](Comm& c, const Array& buf, int dtc, int peer, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "send";
        DataType t = resolveDtype(dtc, buf, n);
        checkRank(n, "dst", peer, c);
        View v = viewOf(buf, msg(n, "tensor").c_str(), t, c);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.send(v.ptr, v.numel, t, peer, o);
      },
      nb::arg("buf"), nb::arg("dtype"), nb::arg("peer"), nb::arg("async_op"), nb::arg("stream"),
      nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "recv",
      [](Comm& c, const Array& buf, int dtc, int peer, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "recv";
        DataType t = resolveDtype(dtc, buf, n);
        checkRank(n, "src", peer, c);
        View v = viewOf(buf, msg(n, "tensor").c_str(), t, c);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.recv(v.ptr, v.numel, t, peer, o);
      },
      nb::arg("buf"), nb::arg("dtype"), nb::arg("peer"), nb::arg("async_op"), nb::arg("stream"),
      nb::arg("hints"), nb::arg("timeout"), kOpts);

  c.def(
      "barrier",
      [](Comm& c, bool async, uintptr_t stream, const Hints& hints, double timeout) {
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.barrier(o);
      },
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kOpts);

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
          "select_all_reduce_algo",
          [](Comm& c, size_t count, int dtc, ReduceOp op, const Hints& hints) {
            CollOptions o;
            o.hints = hints;
            return c.selectAllReduceAlgo(count, checkedDtype(dtc, "select_all_reduce_algo"), op,
                                         o);
          },
          nb::arg("count"), nb::arg("dtype"), nb::arg("op"), nb::arg("hints"),
          "Name of the algorithm an all_reduce with these arguments would use.");
}

}  // namespace cclx::py
