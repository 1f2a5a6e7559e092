// Comm reductions: all_reduce, reduce, reduce_scatter (single buffer and list),
// reduce_scatter_quantized.
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
  defColl(
      c, "all_reduce", "all_reduce", kCollDoc,
      [](const char* n, Comm& c, const Array& send, std::optional<Array> recv, int dtc,
         ReduceOp op) {
        DataType t = reductionDtype(dtc, send, n, op);
        const auto [s, r] = inOrInPlace(n, send, recv, t, c);
        return deferCall(&Comm::allReduce, c, s.ptr, r.ptr, s.numel, t, op);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("op"));

  defColl(
      c, "reduce", "reduce", kCollDoc,
      [](const char* n, Comm& c, const Array& send, std::optional<Array> recv, int dtc, ReduceOp op,
         int root) {
        DataType t = reductionDtype(dtc, send, n, op);
        checkRank(n, "root", root, c);
        const auto [s, r] = inOrInPlace(n, send, recv, t, c);
        return deferCall(&Comm::reduce, c, s.ptr, r.ptr, s.numel, t, op, root);
      },
      nb::arg("send"), nb::arg("recv").none(), nb::arg("dtype"), nb::arg("op"), nb::arg("root"));

  defColl(
      c, "reduce_scatter", "reduce_scatter_single", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Array& recv, int dtc, ReduceOp op) {
        DataType t = reductionDtype(dtc, send, n, op);
        const auto [s, r] = inputOutput(n, send, recv, t, c);
        checkDivisible(n, s.numel, c);
        checkNumel(n, "output", r.numel, s.numel / c.size());
        return deferCall(&Comm::reduceScatter, c, s.ptr, r.ptr, r.numel, t, op);
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"));

  defColl(
      c, "reduce_scatter_list", "reduce_scatter", kCollDoc,
      [](const char* n, Comm& c, const Arrays& sends, const Array& recv, int dtc, ReduceOp op) {
        DataType t = reductionDtype(dtc, recv, n, op);
        View r = viewOf(recv, msg(n, "output").c_str(), t, c);
        std::vector<const void*> ptrs =
            entryPtrs<const void*>(n, "input_list", sends, r.numel, t, c, CountCheck::EachEntry);
        return deferCall(&Comm::reduceScatterList, c, std::move(ptrs), r.ptr, r.numel, t, op);
      },
      nb::arg("sends"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"));

  // f32 input (size() * count elements, any shape), f32 output (count), `seed` one int64 where the
  // data lives (the comm's device; host memory on CPU comms), read when the call runs.
  defColl(
      c, "reduce_scatter_quantized", "reduce_scatter_quantized", kCollDoc,
      [](const char* n, Comm& c, const Array& send, const Array& recv, int dtc, ReduceOp op,
         const Array& seed, int seedCode) {
        const DataType t = resolveDtype(dtc, send, n);
        if (t != DataType::f32)
          argError(msg(n, "input") + " must be float32 (got " + dtypeName(t) + ")");
        const auto [s, r] = inputOutput(n, send, recv, t, c);
        checkDivisible(n, s.numel, c);
        checkNumel(n, "output", r.numel, s.numel / c.size());
        const DataType st = resolveDtype(seedCode, seed, n);
        if (st != DataType::i64)
          argError(msg(n, "seed") + " must be int64 (got " + dtypeName(st) + ")");
        const View sv = viewOf(seed, msg(n, "seed").c_str(), st, c);
        checkNumel(n, "seed", sv.numel, 1);
        return deferCall(&Comm::reduceScatterQuantized, c, static_cast<const float*>(s.ptr),
                         static_cast<float*>(r.ptr), r.numel, op,
                         static_cast<const int64_t*>(sv.ptr));
      },
      nb::arg("send"), nb::arg("recv"), nb::arg("dtype"), nb::arg("op"), nb::arg("seed"),
      nb::arg("seed_dtype"));
}

}  // namespace cclx::py
