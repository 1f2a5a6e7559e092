// Comm grouped calls: batched point to point (send_recv), scatter, gather, gather_single,
// all_gather_v, all_to_all (lists), reduce_scatter_v; and the settings a comm changes after
// creation (set_timeout, set_hints, update_hints), its backend_version and comm_dump.
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
std::vector<View> views(const Arrays& arrays, const char* op, const char* what,
                        DataType t, const Comm& c) {
  std::vector<View> v;
  v.reserve(arrays.size());
  for (const Array& a : arrays) v.push_back(viewOf(a, msg(op, what).c_str(), t, c));
  return v;
}

/// The addresses and element counts of a list of arrays (named `what`), viewed in order.
template <typename Ptr>
struct Entries {
  std::vector<Ptr> ptrs;
  std::vector<size_t> counts;
};
template <typename Ptr>
Entries<Ptr> entries(const Arrays& arrays, const char* op, const char* what,
                     DataType t, const Comm& c) {
  Entries<Ptr> e;
  for (const View& v : views(arrays, op, what, t, c)) {
    e.ptrs.push_back(static_cast<Ptr>(v.ptr));
    e.counts.push_back(v.numel);
  }
  return e;
}

/// scatter and gather: this rank's tensor `one` (named `oneName`; the dtype is its own unless
/// given) after the root check and, at the root, the addresses of the list `list` (named
/// `listName`; one entry per rank, each of as many elements as `one`).
template <typename Ptr>
struct Rooted {
  DataType t;
  View one;
  std::vector<Ptr> ptrs;
};
template <typename Ptr>
Rooted<Ptr> rooted(const char* op, int dtc, const Array& one, const char* oneName,
                   const Arrays& list, const char* listName, int root, const Comm& c) {
  const DataType t = rootedDtype(dtc, one, op, root, c);
  const View v = viewOf(one, msg(op, oneName).c_str(), t, c);
  if (c.rank() != root) return {t, v, {}};
  return {t, v, entryPtrs<Ptr>(op, listName, list, v.numel, t, c, CountCheck::AfterViews)};
}

/// One entry of a batch: (is_send, array, peer, dtype code or -1).
using BatchOp = std::tuple<bool, Array, int, int>;

}  // namespace

void bindGrouped(CommClass& c) {
  defColl(
      c, "send_recv", "batch_op_issue", "ops: (is_send, array, peer, dtype code or -1). ",
      [](const char* n, Comm& c, const std::vector<BatchOp>& ops, int dtc) {
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
        return deferCall(&Comm::sendRecv, c, std::move(sends), std::move(recvs), group);
      },
      nb::arg("ops"), nb::arg("dtype"));

  defColl(
      c, "scatter", "scatter", kCollDoc,
      [](const char* n, Comm& c, const Array& recv, const Arrays& sends, int dtc, int root) {
        auto [t, r, ptrs] =
            rooted<const void*>(n, dtc, recv, "output_tensor", sends, "input_tensor_list", root, c);
        return deferCall(&Comm::scatter, c, std::move(ptrs), r.ptr, r.numel, t, root);
      },
      nb::arg("recv"), nb::arg("sends"), nb::arg("dtype"), nb::arg("root"));

  defColl(
      c, "gather", "gather", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Arrays& recvs, int dtc, int root) {
        auto [t, s, ptrs] =
            rooted<void*>(n, dtc, send, "input_tensor", recvs, "output_tensor_list", root, c);
        return deferCall(&Comm::gather, c, s.ptr, std::move(ptrs), s.numel, t, root);
      },
      nb::arg("send"), nb::arg("recvs"), nb::arg("dtype"), nb::arg("root"));

  defColl(
      c, "gather_single", "gather_single", kCollDoc,
      [](const char* n, Comm& c, const Array& send, std::optional<Array> recv, int dtc, int root) {
        DataType t = rootedDtype(dtc, send, n, root, c);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        void* out = nullptr;
        if (c.rank() == root) {
          if (!recv) argError(msg(n, "the root needs an output"));
          View r = viewOf(*recv, msg(n, "output").c_str(), t, c);
          checkNumel(n, "output", r.numel, s.numel * c.size());
          out = r.ptr;
        }
        return deferCall(&Comm::gatherSingle, c, s.ptr, out, s.numel, t, root);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("root"));

  defColl(
      c, "all_gather_v", "all_gather_v", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Arrays& recvs, int dtc) {
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        checkLength(n, "tensor_list", recvs.size(), c);
        auto [ptrs, counts] = entries<void*>(recvs, n, "tensor_list entry", t, c);
        checkNumel(n, "tensor (this rank's tensor_list entry has the size)", s.numel,
                   counts[static_cast<size_t>(c.rank())]);
        return deferCall(&Comm::allGatherV, c, s.ptr, std::move(ptrs), std::move(counts), t);
      },
      nb::arg("send"), nb::arg("recvs"), nb::arg("dtype"));

  defColl(
      c, "all_to_all_list", "all_to_all", kCollDoc,
      [](const char* n, Comm& c, const Arrays& recvs, const Arrays& sends, int dtc) {
        checkLength(n, "output_tensor_list", recvs.size(), c);
        checkLength(n, "input_tensor_list", sends.size(), c);
        DataType t = resolveDtype(dtc, sends[0], n);
        auto [sp, sc] = entries<const void*>(sends, n, "input_tensor_list entry", t, c);
        auto [rp, rc] = entries<void*>(recvs, n, "output_tensor_list entry", t, c);
        return deferCall(&Comm::allToAllList, c, std::move(sp), std::move(sc), std::move(rp),
                         std::move(rc), t);
      },
      nb::arg("recvs"), nb::arg("sends"), nb::arg("dtype"));

  defColl(
      c, "reduce_scatter_v", "reduce_scatter_v", kCollDoc,
      [](const char* n, Comm& c, const Arrays& sends, const Array& recv, int dtc, ReduceOp op) {
        DataType t = reductionDtype(dtc, recv, n, op);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        checkLength(n, "input_list", sends.size(), c);
        auto [ptrs, counts] = entries<const void*>(sends, n, "input_list entry", t, c);
        checkNumel(n, "output (this rank's input_list entry has the size)", r.numel,
                   counts[static_cast<size_t>(c.rank())]);
        return deferCall(&Comm::reduceScatterV, c, std::move(ptrs), std::move(counts), r.ptr,
                         t, op);
      },
      nb::arg("sends"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"));

  c.def(
       "set_timeout",
       [](Comm& c, double seconds) {
         std::chrono::milliseconds t = msOf(seconds, "set_timeout: timeout");
         if (t.count() <= 0) argError("set_timeout: the timeout must be positive");
         c.setTimeout(t);
       },
       nb::arg("timeout"), "The comm's default timeout (seconds) for later calls.")
      .def("set_hints", &Comm::setHints, nb::arg("hints"),
           "Replaces the comm's hints (checked first: a bad key or value changes nothing).")
      .def("update_hints", &Comm::updateHints, nb::arg("hints"),
           "Sets the given hints, keeps the others (checked as set_hints).")
      .def("backend_version", &Comm::backendVersion,
           "'cclx <version>' (plus ' NCCL <version>' for CUDA comms).")
      .def("comm_dump", &Comm::dump, nb::call_guard<nb::gil_scoped_release>(),
           "This comm's state for hang debugging, dict[str, str] (Comm::dump, "
           "docs/API.md): local, never blocks on peers, works after abort.");
}

}  // namespace cclx::py
