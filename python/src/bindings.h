// Shared declarations of the cclx._C extension (nanobind).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cclx/cclx.hpp>

#include <cstddef>
#include <string>

namespace cclx::py {

namespace nb = nanobind;

/// Any DLPack-capable array; read-only exports accepted (writability of outputs is checked by
/// the Python layer, which knows the producer).
using Array = nb::ndarray<nb::ro>;

void bindErrors(nb::module_& m);
void bindTypes(nb::module_& m);
void bindStore(nb::module_& m);
void bindComm(nb::module_& m);

/// Throws cclx::Error(cclxInvalidArgument, msg) (becomes cclx.CclxInvalidArgument).
[[noreturn]] void argError(const std::string& msg);

/// A validated view of one array argument.
struct View {
  void* ptr = nullptr;
  size_t numel = 0;
  int devType = 0;  // DLPack device type
  int devId = 0;
};

/// Checks `a` (named `what` in messages) against the comm's device and element type:
/// contiguous, element size of `dtype`, on the comm's device. Returns pointer and element count.
View viewOf(const Array& a, const char* what, DataType dtype, const Comm& comm);

/// Element type of `a` from its DLPack dtype (override >= 0 wins after a size check).
DataType dtypeOf(const Array& a, int override, const char* what);

}  // namespace cclx::py
