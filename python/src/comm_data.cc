// Comm data movement: broadcast, all_gather (single buffer and list), all_to_all(_v), send,
// recv, barrier.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cclx::py {
namespace {

/// One side's all_to_all_v counts as the C++ API takes them: each >= 0, together exactly the
/// `numel` elements of the buffer. That there is one count per rank is checked by the C++ API.
std::vector<size_t> splitCounts(const char* op, const char* what,
                                const std::vector<int64_t>& counts, size_t numel) {
  std::vector<size_t> out;
  out.reserve(counts.size());
  size_t left = numel;
  bool fits = true;
  for (int64_t k : counts) {
    fits = fits && k >= 0 && static_cast<uint64_t>(k) <= left;
    if (!fits) break;
    left -= static_cast<size_t>(k);
    out.push_back(static_cast<size_t>(k));
  }
  if (!fits || left != 0) {
    argError(std::string(op) + ": " + what + "_split_sizes must be >= 0 and sum to the " + what +
             "'s " + std::to_string(numel) + " elements");
  }
  return out;
}

}  // namespace

void bindDataMovement(CommClass& c) {
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
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

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
      nb::arg("hints"), nb::arg("timeout"), kCollDoc);

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
      nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);

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
      nb::arg("hints"), nb::arg("timeout"), kCollDoc);

  c.def(
      "all_to_all_v",
      [](Comm& c, const Array& send, const Array& recv, const std::vector<int64_t>& sendCounts,
         const std::vector<int64_t>& recvCounts, int dtc, bool async, uintptr_t stream,
         const Hints& hints, double timeout) {
        const char* n = "all_to_all_v_single";
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "input").c_str(), t, c);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        std::vector<size_t> sc = splitCounts(n, "input", sendCounts, s.numel);
        std::vector<size_t> rc = splitCounts(n, "output", recvCounts, r.numel);
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.allToAllV(s.ptr, sc, r.ptr, rc, t, o);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("send_counts"), nb::arg("recv_counts"),
      nb::arg("dtype"), nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"),
      nb::arg("timeout"), "Counts in elements. " );

  // send and recv: one point-to-point message with a peer other than this rank.
  auto bindP2P = [&](const char* name, const char* peerName, auto call) {
    c.def(
        name,
        [name, peerName, call](Comm& c, const Array& buf, int dtc, int peer, bool async,
                               uintptr_t stream, const Hints& hints, double timeout) {
          DataType t = resolveDtype(dtc, buf, name);
          checkRank(name, peerName, peer, c);
          if (peer == c.rank())
            argError(std::string(name) + ": " + peerName + " " + std::to_string(peer) +
                     " is this rank");
          View v = viewOf(buf, msg(name, "tensor").c_str(), t, c);
          CollOptions o = collOpts(async, stream, hints, timeout);
          nb::gil_scoped_release nogil;
          return call(c, v.ptr, v.numel, t, peer, o);
        },
        nb::arg("buf"), nb::arg("dtype"), nb::arg("peer"), nb::arg("async_op"),
        nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);
  };
  bindP2P("send", "dst",
          [](Comm& c, void* p, size_t n, DataType t, int peer, const CollOptions& o) {
            return c.send(p, n, t, peer, o);
          });
  bindP2P("recv", "src",
          [](Comm& c, void* p, size_t n, DataType t, int peer, const CollOptions& o) {
            return c.recv(p, n, t, peer, o);
          });

  c.def(
      "barrier",
      [](Comm& c, bool async, uintptr_t stream, const Hints& hints, double timeout) {
        CollOptions o = collOpts(async, stream, hints, timeout);
        nb::gil_scoped_release nogil;
        return c.barrier(o);
      },
      nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"), nb::arg("timeout"), kCollDoc);
}

}  // namespace cclx::py
