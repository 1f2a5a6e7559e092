// Comm grouped calls: batched point to point (send_recv), scatter, gather, gather_single,
// all_gather_v, all_to_all (lists), reduce_scatter_v; and the settings a comm changes after
// creation (set_timeout, set_hints) and its backend_version.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace cclx::py {
namespace {

/// Views of a list of arrays of dtype `t` (named `what` in messages).
std::vector<View> views(const std::vector<Array>& arrays, const char* op, const char* what,
                        DataType t, const Comm& c) {
  std::vector<View> v;
  v.reserve(arrays.size());
  for (const Array& a : arrays) v.push_back(viewOf(a, msg(op, what).c_str(), t, c));
  return v;
}

void checkLength(const char* op, const char* what, size_t got, const Comm& c) {
  checkNumel(op, (std::string(what) + " (length)").c_str(), got, static_cast<size_t>(c.size()));
}

/// One entry of a batch: (is_send, array, peer, dtype code or -1).
using BatchOp = std::tuple<bool, Array, int, int>;

}  // namespace

void bindGrouped(CommClass& c) {
  c.def(
      "send_recv",
      [](Comm& c, const std::vector<BatchOp>& ops, int dtc, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "batch_op_issue";
        // Every op moves its bytes; the group's dtype (the ops' common one, or u8 for a batch
        // of mixed dtypes) only sets the element size NCCL counts in.
        const DataType group = checkedDtype(dtc, n);
        const size_t ges = dtypeSize(group);
        std::vector<P2PSend> sends;
        std::vector<P2PRecv> recvs;
        for (size_t i = 0; i < ops.size(); ++i) {
          const auto& [isSend, arr, peer, code] = ops[i];
          const std::string what = std::string(n) + ": op " + std::to_string(i) +
                                   (isSend ? " (send)" : " (recv)");
          checkRank(what.c_str(), isSend ? "dst" : "src", peer, c);
          const DataType t = resolveDtype(code, arr, what.c_str());
          const View v = viewOf(arr, what.c_str(), t, c);
          const size_t bytes = v.numel * dtypeSize(t);
          if (bytes % ges != 0) argError(what + ": its bytes are not whole elements of the batch's dtype");
          if (isSend) sends.push_back({peer, v.ptr, bytes / ges});
          else recvs.push_back({peer, v.ptr, bytes / ges});
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.sendRecv(sends, recvs, group, o);
      },
      nb::arg("ops"), nb::arg("dtype"), nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"),
      nb::arg("timeout"), "ops: (is_send, array, peer, dtype code or -1). " );

  c.def(
      "scatter",
      [](Comm& c, const Array& recv, const std::vector<Array>& sends, int dtc, int root,
         bool async, uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "scatter";
        DataType t = resolveDtype(dtc, recv, n);
        checkRank(n, "root", root, c);
        View r = viewOf(recv, msg(n, "output_tensor").c_str(), t, c);
        std::vector<const void*> ptrs;
        if (c.rank() == root) {
          checkLength(n, "input_tensor_list", sends.size(), c);
          for (const View& s : views(sends, n, "input_tensor_list entry", t, c)) {
            checkNumel(n, "an input_tensor_list entry", s.numel, r.numel);
            ptrs.push_back(s.ptr);
          }
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.scatter(ptrs, r.ptr, r.numel, t, root, o);
      },
      nb::arg("recv"), nb::arg("sends"), nb::arg("dtype"), nb::arg("root"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "gather",
      [](Comm& c, const Array& send, const std::vector<Array>& recvs, int dtc, int root,
         bool async, uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "gather";
        DataType t = resolveDtype(dtc, send, n);
        checkRank(n, "root", root, c);
        View s = viewOf(send, msg(n, "input_tensor").c_str(), t, c);
        std::vector<void*> ptrs;
        if (c.rank() == root) {
          checkLength(n, "output_tensor_list", recvs.size(), c);
          for (const View& r : views(recvs, n, "output_tensor_list entry", t, c)) {
            checkNumel(n, "an output_tensor_list entry", r.numel, s.numel);
            ptrs.push_back(r.ptr);
          }
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.gather(s.ptr, ptrs, s.numel, t, root, o);
      },
      nb::arg("send"), nb::arg("recvs"), nb::arg("dtype"), nb::arg("root"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "gather_single",
      [](Comm& c, const Array& send, std::optional<Array> recv, int dtc, int root, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "gather_single";
        DataType t = resolveDtype(dtc, send, n);
        checkRank(n, "root", root, c);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        void* out = nullptr;
        if (c.rank() == root) {
          if (!recv) argError(msg(n, "the root needs an output"));
          View r = viewOf(*recv, msg(n, "output").c_str(), t, c);
          checkNumel(n, "output", r.numel, s.numel * c.size());
          out = r.ptr;
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.gatherSingle(s.ptr, out, s.numel, t, root, o);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("root"),
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "all_gather_v",
      [](Comm& c, const Array& send, const std::vector<Array>& recvs, int dtc, bool async,
         uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "all_gather_v";
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        checkLength(n, "tensor_list", recvs.size(), c);
        std::vector<void*> ptrs;
        std::vector<size_t> counts;
        for (const View& r : views(recvs, n, "tensor_list entry", t, c)) {
          ptrs.push_back(r.ptr);
          counts.push_back(r.numel);
        }
        checkNumel(n, "tensor (this rank's tensor_list entry has the size)", s.numel,
                   counts[static_cast<size_t>(c.rank())]);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allGatherV(s.ptr, ptrs, counts, t, o);
      },
      nb::arg("send"), nb::arg("recvs"), nb::arg("dtype"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "all_to_all_list",
      [](Comm& c, const std::vector<Array>& recvs, const std::vector<Array>& sends, int dtc,
         bool async, uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "all_to_all";
        checkLength(n, "output_tensor_list", recvs.size(), c);
        checkLength(n, "input_tensor_list", sends.size(), c);
        DataType t = resolveDtype(dtc, sends[0], n);
        std::vector<const void*> sp;
        std::vector<void*> rp;
        std::vector<size_t> sc, rc;
        for (const View& v : views(sends, n, "input_tensor_list entry", t, c)) {
          sp.push_back(v.ptr);
          sc.push_back(v.numel);
        }
        for (const View& v : views(recvs, n, "output_tensor_list entry", t, c)) {
          rp.push_back(v.ptr);
          rc.push_back(v.numel);
        }
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allToAllList(sp, sc, rp, rc, t, o);
      },
      nb::arg("recvs"), nb::arg("sends"), nb::arg("dtype"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "reduce_scatter_v",
      [](Comm& c, const std::vector<Array>& sends, const Array& recv, int dtc, ReduceOp op,
         bool async, uintptr_t stream, const Hints& hints, double timeout) {
        const char* n = "reduce_scatter_v";
        DataType t = resolveDtype(dtc, recv, n);
        checkOp(n, op, t);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        checkLength(n, "input_list", sends.size(), c);
        std::vector<const void*> ptrs;
        std::vector<size_t> counts;
        for (const View& s : views(sends, n, "input_list entry", t, c)) {
          ptrs.push_back(s.ptr);
          counts.push_back(s.numel);
        }
        checkNumel(n, "output (this rank's input_list entry has the size)", r.numel,
                   counts[static_cast<size_t>(c.rank())]);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.reduceScatterV(ptrs, counts, r.ptr, t, op, o);
      },
      nb::arg("sends"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"), nb::arg("async_op"),
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
       "set_timeout",
       [](Comm& c, double seconds) {
         std::chrono::milliseconds t = msOf(seconds, "set_timeout: timeout");
         if (t.count() <= 0) argError("set_timeout: the timeout must be positive");
         c.setTimeout(t);
       },
       nb::arg("timeout"), "The comm's default timeout (seconds) for later calls.")
      .def("set_hints", &Comm::setHints, nb::arg("hints"), "Replaces the comm's hints.")
      .def("backend_version", &Comm::backendVersion,
           "'cclx <version>' (plus ' NCCL <version>' for CUDA comms).");
}

}  // namespace cclx::py
