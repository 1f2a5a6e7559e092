// DataType, RedOpKind and ReduceOp (with the PREMUL_SUM factor).
#include "bindings.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <string>
#include <utility>

namespace cclx::py {

void bindTypes(nb::module_& m) {
  nb::enum_<DataType>(m, "DataType", nb::is_arithmetic(), "Element types understood by cclx.")
      .value("f32", DataType::f32)
      .value("f64", DataType::f64)
      .value("f16", DataType::f16)
      .value("bf16", DataType::bf16)
      .value("i8", DataType::i8)
      .value("u8", DataType::u8)
      .value("i32", DataType::i32)
      .value("i64", DataType::i64)
      .value("u32", DataType::u32)
      .value("u64", DataType::u64)
      .value("fp8_e4m3", DataType::fp8_e4m3)
      .value("fp8_e5m2", DataType::fp8_e5m2);

  nb::enum_<RedOpKind>(m, "RedOpType", nb::is_arithmetic(), "Kind of a ReduceOp.")
      .value("SUM", RedOpKind::SUM)
      .value("PRODUCT", RedOpKind::PRODUCT)
      .value("MIN", RedOpKind::MIN)
      .value("MAX", RedOpKind::MAX)
      .value("AVG", RedOpKind::AVG)
      .value("BAND", RedOpKind::BAND)
      .value("BOR", RedOpKind::BOR)
      .value("BXOR", RedOpKind::BXOR)
      .value("PREMUL_SUM", RedOpKind::PREMUL_SUM);

  m.def("dtype_size", &dtypeSize, nb::arg("dtype"), "Bytes per element of `dtype`.");
  m.def("dtype_name", [](DataType t) { return std::string(dtypeName(t)); }, nb::arg("dtype"),
        "Short name of `dtype` ('f32', 'bf16', ...).");
  m.def("dtype_from_name", &dtypeFromName, nb::arg("name"),
        "DataType for a short name; raises CclxInvalidArgument for an unknown one.");
  m.def("op_supported", &opSupported, nb::arg("op"), nb::arg("dtype"),
        "True when the reduction `op` is defined for `dtype`.");

  auto cls = nb::class_<ReduceOp>(
      m, "ReduceOp",
      "A reduction operator: ReduceOp.SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR, or\n"
      "ReduceOp.PREMUL_SUM(factor) (every input multiplied by `factor` before the sum).");
  cls.def(nb::init<RedOpKind>(), nb::arg("type"))
      .def_prop_ro("type", [](const ReduceOp& o) { return o.kind; }, "The RedOpType.")
      .def_prop_ro("factor", [](const ReduceOp& o) { return o.factor; },
                   "PREMUL_SUM factor (1.0 for the other ops).")
      .def_static(
          "PREMUL_SUM",
          [](double f) {
            if (!std::isfinite(f)) argError("ReduceOp.PREMUL_SUM: factor must be finite");
            return ReduceOp::premulSum(f);
          },
          nb::arg("factor"), "SUM of inputs each multiplied by `factor` first.")
      .def("__eq__",
           [](const ReduceOp& a, const ReduceOp& b) {
             return a.kind == b.kind && a.factor == b.factor;
           })
      .def("__hash__",
           [](const ReduceOp& a) {
             return std::hash<double>()(a.factor) ^ (static_cast<size_t>(a.kind) << 1);
           })
      .def("__repr__", [](const ReduceOp& o) {
        static const char* names[] = {"SUM", "PRODUCT", "MIN",  "MAX",       "AVG",
                                      "BAND", "BOR",     "BXOR", "PREMUL_SUM"};
        int k = static_cast<int>(o.kind);
        std::string s = std::string("ReduceOp.") + (k >= 0 && k < 9 ? names[k] : "?");
        if (o.kind == RedOpKind::PREMUL_SUM) s += "(" + std::to_string(o.factor) + ")";
        return s;
      });
  const std::pair<const char*, RedOpKind> named[] = {
      {"SUM", RedOpKind::SUM}, {"PRODUCT", RedOpKind::PRODUCT}, {"MIN", RedOpKind::MIN},
      {"MAX", RedOpKind::MAX}, {"AVG", RedOpKind::AVG},         {"BAND", RedOpKind::BAND},
      {"BOR", RedOpKind::BOR}, {"BXOR", RedOpKind::BXOR}};
  for (const auto& [name, kind] : named) cls.attr(name) = nb::cast(ReduceOp(kind));
}

}  // namespace cclx::py
