// How many elements of the cclx type one tensor element is, from the tensor's type alone. No
// torch headers: tests/cpp/torchcomms checks the rule without torchcomms.
#pragma once

#include <cstddef>

#include <cclx/cclx.hpp>

namespace cclx::tc {

/// Elements of `cclxType` (what convert.h's dataBuf / reduceBuf chose for the tensor) per tensor
/// element of `elementSize` bytes: 2 for a complex tensor reduced as pairs of its real type, the
/// byte count for a type that travels as bytes (u8), 1 for a type cclx names. It depends on the
/// types only, never on a tensor's count: every rank of a call scales its counts alike, also a
/// rank whose own tensor is empty.
inline size_t elementScale(size_t elementSize, DataType cclxType) {
  const size_t s = dtypeSize(cclxType);
  return s && elementSize > s ? elementSize / s : 1;
}

}  // namespace cclx::tc
