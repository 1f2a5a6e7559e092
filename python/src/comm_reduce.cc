// Comm reductions: all_reduce, reduce, reduce_scatter (single buffer and list).
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace cclx::py {

void bindReductions(CommClass& c) {
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
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

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
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "reduce_scatter",
      [](Comm& c, const Array& send, const Array& recv, int dtc, ReduceOp op, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "reduce_scatter_single";
        DataType t = resolveDtype(dtc, send, n);
        checkOp(n, op, t);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        if (s.numel % c.size() != 0) {
          argError(std::string(n) + ": input has " + std::to_string(s.numel) +
                   " elements, not a multiple of the communicator size " +
                   std::to_string(c.size()));
        }
        checkNumel(n, "output", r.numel, s.numel / c.size());
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.reduceScatter(s.ptr, r.ptr, r.numel, t, op, o);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

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
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);
}

}  // namespace cclx::py
