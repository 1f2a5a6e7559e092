// Comm data movement: broadcast, all_gather (single buffer and list), all_to_all(_v), the
// all-to-all-v of split sizes where the data is (all_to_all_v_device), send, recv, barrier.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
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

/// (rows along dim 0, elements per row) of a buffer of device_alltoallv_single (named `what`).
std::pair<size_t, size_t> rowsOf(const char* op, const char* what, const Array& a) {
  if (a.ndim() == 0) argError(msg(op, what) + " must have at least one dimension (rows along dim 0)");
  size_t per = 1;
  for (size_t i = 1; i < a.ndim(); ++i) per *= static_cast<size_t>(a.shape(i));
  return {static_cast<size_t>(a.shape(0)), per};
}

/// A split-size argument of device_alltoallv_single: int64, one entry per rank, contiguous, where
/// the comm's data is (the GPU of a CUDA comm, host memory of a CPU comm).
const int64_t* splitSizes(const char* op, const char* what, const Array& a, const Comm& c) {
  const nb::dlpack::dtype dt = a.dtype();
  if (dt.code != static_cast<uint8_t>(nb::dlpack::dtype_code::Int) || dt.bits != 64 || dt.lanes != 1)
    argError(msg(op, what) + " must be an int64 tensor (got DLPack code " +
             std::to_string(dt.code) + ", " + std::to_string(dt.bits) + " bits)");
  const View v = viewOf(a, msg(op, what).c_str(), DataType::i64, c);
  checkNumel(op, what, v.numel, static_cast<size_t>(c.size()));
  return static_cast<const int64_t*>(v.ptr);
}

}  // namespace

void bindDataMovement(CommClass& c) {
  defColl(
      c, "broadcast", "broadcast", kCollDoc,
      [](const char* n, Comm& c, const Array& send, std::optional<Array> recv, int dtc, int root) {
        DataType t = rootedDtype(dtc, send, n, root, c);
        const auto [s, r] = inOrInPlace(n, send, recv, t, c);
        return deferCall(&Comm::broadcast, c, s.ptr, r.ptr, s.numel, t, root);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("root"));

  defColl(
      c, "all_gather", "all_gather_single", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Array& recv, int dtc) {
        DataType t = resolveDtype(dtc, send, n);
        const auto [s, r] = inputOutput(n, send, recv, t, c);
        checkNumel(n, "output", r.numel, s.numel * c.size());
        return deferCall(&Comm::allGather, c, s.ptr, r.ptr, s.numel, t);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"));

  defColl(
      c, "all_gather_list", "all_gather", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Arrays& recvs, int dtc) {
        DataType t = resolveDtype(dtc, send, n);
        View s = viewOf(send, msg(n, "tensor").c_str(), t, c);
        std::vector<void*> ptrs =
            entryPtrs<void*>(n, "tensor_list", recvs, s.numel, t, c, CountCheck::EachEntry);
        return deferCall(&Comm::allGatherList, c, s.ptr, std::move(ptrs), s.numel, t);
      },
      nb::arg("send"), nb::arg("recvs"), nb::arg("dtype"));

  defColl(
      c, "all_to_all", "all_to_all_single", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Array& recv, int dtc) {
        DataType t = resolveDtype(dtc, send, n);
        const auto [s, r] = inputOutput(n, send, recv, t, c);
        checkNumel(n, "output", r.numel, s.numel);
        checkDivisible(n, s.numel, c);
        return deferCall(&Comm::allToAll, c, s.ptr, r.ptr, s.numel / c.size(), t);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"));

  defColl(
      c, "all_to_all_v", "all_to_all_v_single", "Counts in elements. ",
      [](const char* n, Comm& c, const Array& send, const Array& recv,
         const std::vector<int64_t>& sendCounts, const std::vector<int64_t>& recvCounts, int dtc) {
        DataType t = resolveDtype(dtc, send, n);
        const auto [s, r] = inputOutput(n, send, recv, t, c);
        std::vector<size_t> sc = splitCounts(n, "input", sendCounts, s.numel);
        std::vector<size_t> rc = splitCounts(n, "output", recvCounts, r.numel);
        return deferCall(&Comm::allToAllV, c, s.ptr, std::move(sc), r.ptr, std::move(rc), t);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("send_counts"), nb::arg("recv_counts"),
      nb::arg("dtype"));

  defColl(
      c, "all_to_all_v_device", "device_alltoallv_single",
      "Split sizes: int64 arrays of size() row counts (dim 0) where the data is; the buffers' "
      "dim 0 is their capacity in rows. ",
      [](const char* n, Comm& c, const Array& send, const Array& recv, const Array& sendSplits,
         const Array& recvSplits, int dtc) {
        DataType t = resolveDtype(dtc, send, n);
        const auto [s, r] = inputOutput(n, send, recv, t, c);
        const auto [sendCap, sendRow] = rowsOf(n, "input", send);
        const auto [recvCap, recvRow] = rowsOf(n, "output", recv);
        if (sendRow != recvRow)
          argError(std::string(n) + ": input rows hold " + std::to_string(sendRow) +
                   " elements but output rows " + std::to_string(recvRow));
        const int64_t* ss = splitSizes(n, "input_split_sizes", sendSplits, c);
        const int64_t* rs = splitSizes(n, "output_split_sizes", recvSplits, c);
        return deferCall(&Comm::allToAllVDevice, c, static_cast<const void*>(s.ptr), r.ptr, ss,
                         rs, sendRow, t, sendCap, recvCap);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("send_split_sizes"),
      nb::arg("recv_split_sizes"), nb::arg("dtype"));

  // send and recv: one point-to-point message with a peer other than this rank.
  auto bindP2P = [&](const char* name, const char* peerName, auto call) {
    defColl(
        c, name, name, kCollDoc,
        [peerName, call](const char* n, Comm& c, const Array& buf, int dtc, int peer) {
          DataType t = resolveDtype(dtc, buf, n);
          checkRank(n, peerName, peer, c);
          if (peer == c.rank())
            argError(std::string(n) + ": " + peerName + " " + std::to_string(peer) +
                     " is this rank");
          View v = viewOf(buf, msg(n, "tensor").c_str(), t, c);
          return deferCall(call, c, v.ptr, v.numel, t, peer);
        },
        nb::arg("buf"), nb::arg("dtype"), nb::arg("peer"));
  };
  bindP2P("send", "dst",
          [](Comm& c, void* p, size_t n, DataType t, int peer, const CollOptions& o) {
            return c.send(p, n, t, peer, o);
          });
  bindP2P("recv", "src",
          [](Comm& c, void* p, size_t n, DataType t, int peer, const CollOptions& o) {
            return c.recv(p, n, t, peer, o);
          });

  defColl(
      c, "barrier", "barrier", kCollDoc,
      [](const char*, Comm& c) { return deferCall(&Comm::barrier, c); });
}

}  // namespace cclx::py
