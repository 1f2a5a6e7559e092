// The fused allreduce + residual add + RMSNorm (+ FP8) (Comm::allReduceRmsNorm) and what it would
// run. The Python layer (cclx/comm.py, cclx/_fused_op.py) allocates the outputs and passes every
// buffer; this checks sizes, dtypes and devices before anything is enqueued.
#include "bindings.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <optional>

namespace cclx::py {

void bindFused(CommClass& c) {
  defColl(
      c, "all_reduce_rmsnorm", "all_reduce_rmsnorm",
      "Fused allreduce + residual add + RMSNorm (+ FP8). Trailing arguments: async_op, stream "
      "(cudaStream_t as int), hints, timeout s.",
      [](const char* n, Comm& c, const Array& x, const Array& residual, const Array& residualOut,
         const Array& weight, std::optional<Array> out, std::optional<Array> fp8Out,
         std::optional<Array> scales, std::optional<Array> staticScale, int dtc, size_t hidden,
         double eps) {
        const DataType t = resolveDtype(dtc, x, n);
        if (t != DataType::f32 && t != DataType::bf16 && t != DataType::f16)
          argError(std::string(n) + ": x has dtype " + dtypeName(t) + "; expected f32, bf16 or f16");
        if (hidden == 0) argError(std::string(n) + ": the last dimension of x is 0");
        const View vx = viewOf(x, msg(n, "x").c_str(), t, c);
        if (vx.numel % hidden)
          argError(std::string(n) + ": x has " + std::to_string(vx.numel) +
                   " elements, not a multiple of hidden " + std::to_string(hidden));
        const size_t tokens = vx.numel / hidden;
        const View vr = viewOf(residual, msg(n, "residual").c_str(), t, c);
        checkNumel(n, "residual", vr.numel, vx.numel);
        const View vro = viewOf(residualOut, msg(n, "residual output").c_str(), t, c);
        checkNumel(n, "residual output", vro.numel, vx.numel);
        const View vw = viewOf(weight, msg(n, "weight").c_str(), t, c);
        checkNumel(n, "weight", vw.numel, hidden);
        RmsNormArgs a;
        a.x = vx.ptr;
        a.residual = vr.ptr;
        a.residualOut = vro.ptr;
        a.weight = vw.ptr;
        if (out) {
          const View v = viewOf(*out, msg(n, "output").c_str(), t, c);
          checkNumel(n, "output", v.numel, vx.numel);
          a.out = v.ptr;
        }
        if (fp8Out) {
          const View v = viewOf(*fp8Out, msg(n, "FP8 output").c_str(), DataType::fp8_e4m3, c);
          checkNumel(n, "FP8 output", v.numel, vx.numel);
          a.fp8Out = v.ptr;
        }
        if (scales) {
          const View v = viewOf(*scales, msg(n, "scales").c_str(), DataType::f32, c);
          checkNumel(n, "scales", v.numel, tokens);
          a.scales = static_cast<float*>(v.ptr);
        }
        if (staticScale) {
          const View v = viewOf(*staticScale, msg(n, "scale").c_str(), DataType::f32, c);
          checkNumel(n, "scale", v.numel, 1);
          a.staticScale = static_cast<const float*>(v.ptr);
        }
        a.tokens = tokens;
        a.hidden = hidden;
        a.dtype = t;
        a.eps = float(eps);
        return deferCall(&Comm::allReduceRmsNorm, c, a);
      },
      nb::arg("x"), nb::arg("residual"), nb::arg("residual_out"), nb::arg("weight"),
      nb::arg("out").none(), nb::arg("fp8_out").none(), nb::arg("scales").none(),
      nb::arg("static_scale").none(), nb::arg("dtype"), nb::arg("hidden"), nb::arg("eps"));

  c.def(
      "select_all_reduce_rmsnorm_algo",
      [](Comm& c, size_t tokens, size_t hidden, int dtc, bool out, bool fp8, bool staticScale,
         const Hints& hints) {
        RmsNormArgs a;
        a.tokens = tokens;
        a.hidden = hidden;
        a.dtype = checkedDtype(dtc, "select_all_reduce_rmsnorm_algo");
        // Placeholders: only their presence matters to the selection.
        static float dummy;
        a.out = out ? &dummy : nullptr;
        a.fp8Out = fp8 ? &dummy : nullptr;
        a.staticScale = staticScale ? &dummy : nullptr;
        CollOptions o;
        o.hints = hints;
        return c.selectAllReduceRmsNormAlgo(a, o);
      },
      nb::arg("tokens"), nb::arg("hidden"), nb::arg("dtype"), nb::arg("out"), nb::arg("fp8"),
      nb::arg("static_scale"), nb::arg("hints"),
      "What all_reduce_rmsnorm would run for these arguments.");
}

}  // namespace cclx::py
