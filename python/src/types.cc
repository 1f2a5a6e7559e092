// DataType, RedOpKind and ReduceOp (with the PREMUL_SUM factor).
#include "bindings.h"

#include <nanobind/stl/string.h>

#include <cmath>
#include <iterator>
#include <string>
#include <utility>

namespace cclx::py {
namespace {

/// The reduction kinds by their Python names, in RedOpKind order (redOpName indexes it).
constexpr std::pair<const char*, RedOpKind> kRedOps[] = {
    {"SUM", RedOpKind::SUM},   {"PRODUCT", RedOpKind::PRODUCT},
    {"MIN", RedOpKind::MIN},   {"MAX", RedOpKind::MAX},
    {"AVG", RedOpKind::AVG},   {"BAND", RedOpKind::BAND},
    {"BOR", RedOpKind::BOR},   {"BXOR", RedOpKind::BXOR},
    {"PREMUL_SUM", RedOpKind::PREMUL_SUM},
};
static_assert(std::size(kRedOps) == cclxNumOps &&
              kRedOps[cclxNumOps - 1].second == RedOpKind::PREMUL_SUM);

}  // namespace

const char* redOpName(RedOpKind k) {
  const int i = static_cast<int>(k);
  return i >= 0 && i < static_cast<int>(std::size(kRedOps)) ? kRedOps[i].first : "?";
}

void bindTypes(nb::module_& m) {
  auto dtypes =
      nb::enum_<DataType>(m, "DataType", nb::is_arithmetic(), "Element types understood by cclx.");
  for (int k = 0; k < cclxNumTypes; ++k) dtypes.value(dtypeName(DataType(k)), DataType(k));

  auto kinds = nb::enum_<RedOpKind>(m, "RedOpType", nb::is_arithmetic(), "Kind of a ReduceOp.");
  for (const auto& [name, kind] : kRedOps) kinds.value(name, kind);

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
        std::string s = std::string("ReduceOp.") + redOpName(o.kind);
        if (o.kind == RedOpKind::PREMUL_SUM) s += "(" + std::to_string(o.factor) + ")";
        return s;
      });
  // ReduceOp.SUM ... ReduceOp.BXOR (PREMUL_SUM is the factory above).
  for (const auto& [name, kind] : kRedOps)
    if (kind != RedOpKind::PREMUL_SUM) cls.attr(name) = nb::cast(ReduceOp(kind));
}

}  // namespace cclx::py
