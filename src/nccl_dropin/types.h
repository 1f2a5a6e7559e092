// NCCL's element types and built-in reductions as cclx's: the one mapping the drop-in's paths
// share.
#pragma once

#include <cclx/cclx.hpp>

#include "nccl_dropin/abi.h"

namespace cclx {
namespace dropin {

/// cclx's type of NCCL's `t`; false where cclx has none. `fp8`: whether the two FP8 types count
/// (ranks sharing a GPU move them; the intercepted reductions leave them to NCCL).
inline bool toCclxType(ncclDataType_t t, DataType& out, bool fp8) {
  switch (t) {
    case nccl::ncclInt8: out = DataType::i8; return true;
    case nccl::ncclUint8: out = DataType::u8; return true;
    case nccl::ncclInt32: out = DataType::i32; return true;
    case nccl::ncclUint32: out = DataType::u32; return true;
    case nccl::ncclInt64: out = DataType::i64; return true;
    case nccl::ncclUint64: out = DataType::u64; return true;
    case nccl::ncclFloat16: out = DataType::f16; return true;
    case nccl::ncclFloat32: out = DataType::f32; return true;
    case nccl::ncclFloat64: out = DataType::f64; return true;
    case nccl::ncclBfloat16: out = DataType::bf16; return true;
    case nccl::ncclFloat8e4m3: out = DataType::fp8_e4m3; return fp8;
    case nccl::ncclFloat8e5m2: out = DataType::fp8_e5m2; return fp8;
    default: return false;  // anything newer: NCCL's
  }
}

/// cclx's reduction of NCCL's built-in `op`; false for anything else (a PreMulSum handle).
inline bool toCclxOp(ncclRedOp_t op, RedOpKind& out) {
  switch (op) {
    case nccl::ncclSum: out = RedOpKind::SUM; return true;
    case nccl::ncclProd: out = RedOpKind::PRODUCT; return true;
    case nccl::ncclMax: out = RedOpKind::MAX; return true;
    case nccl::ncclMin: out = RedOpKind::MIN; return true;
    case nccl::ncclAvg: out = RedOpKind::AVG; return true;
    default: return false;
  }
}

}  // namespace dropin
}  // namespace cclx
