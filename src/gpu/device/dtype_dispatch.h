// The element-type dispatch of every kernel launch, written once (host code; no CUDA needed, so a
// CPU test checks it): a launch names the element types its kernel is instantiated for, and
// dispatchDtype maps the call's DataType to one of them, or throws cclxInternalError naming the
// dtype and the kernel. A dtype that got past a kernel's canRun() but that the kernel does not
// implement is a bug of the caller; it must never run as another type.
#pragma once

#include <cstdint>
#include <type_traits>

#include "base/error.h"
#include "core/elements/dtype_math.h"  // f16_t, bf16_t

namespace cclx {
namespace dev {

/// The element types a kernel is instantiated for.
template <class... Ts>
struct Types {};

/// The DataType of an element type.
template <class T> struct DtypeOf;
template <> struct DtypeOf<float> { static constexpr DataType value = DataType::f32; };
template <> struct DtypeOf<double> { static constexpr DataType value = DataType::f64; };
template <> struct DtypeOf<f16_t> { static constexpr DataType value = DataType::f16; };
template <> struct DtypeOf<bf16_t> { static constexpr DataType value = DataType::bf16; };
template <> struct DtypeOf<int8_t> { static constexpr DataType value = DataType::i8; };
template <> struct DtypeOf<uint8_t> { static constexpr DataType value = DataType::u8; };
template <> struct DtypeOf<int32_t> { static constexpr DataType value = DataType::i32; };
template <> struct DtypeOf<int64_t> { static constexpr DataType value = DataType::i64; };
template <> struct DtypeOf<uint32_t> { static constexpr DataType value = DataType::u32; };
template <> struct DtypeOf<uint64_t> { static constexpr DataType value = DataType::u64; };

/// The DDA reduction kernels (every dtype of ddaOpSupported, gpu/dda/dda.h).
using DdaTypes = Types<float, double, f16_t, bf16_t, int32_t, int64_t, uint32_t, uint64_t, int8_t,
                       uint8_t>;
/// The floating-point types of the data-as-flag allreduce (lamport::typeSupported).
using LamportTypes = Types<float, double, f16_t, bf16_t>;
/// The FP8-coded kernels and the fused allreduce + RMSNorm kernels.
using RowTypes = Types<float, bf16_t, f16_t>;

/// The reduction ops a DDA reduce kernel instance for T has a body for (bit RedOpKind), written once:
/// the device's dispatchOp (units.cuh) instantiates exactly these, and ddaKernelDtype picks the
/// instance on the host. SUM's body also computes AVG (one division of the reduced value) and
/// PREMUL_SUM (each value scaled as loaded), so neither has a body of its own. A signed integer
/// type has no PRODUCT or bitwise body: those give the same bits on the unsigned type of its width
/// (math::mul wraps through it), and ddaKernelDtype launches that type's instance.
constexpr uint32_t opBit(RedOpKind op) { return 1u << unsigned(op); }
template <class T>
inline constexpr uint32_t kDdaInstanceOps =
    opBit(RedOpKind::SUM) | opBit(RedOpKind::AVG) | opBit(RedOpKind::PREMUL_SUM) |
    opBit(RedOpKind::MIN) | opBit(RedOpKind::MAX) |
    (std::is_integral_v<T> && std::is_signed_v<T> ? 0u : opBit(RedOpKind::PRODUCT)) |
    (std::is_integral_v<T> && std::is_unsigned_v<T>
         ? opBit(RedOpKind::BAND) | opBit(RedOpKind::BOR) | opBit(RedOpKind::BXOR)
         : 0u);

/// The element type whose DDA reduce instance runs (t, op): t itself, or for a signed integer
/// type with an op its instance has no body for, the unsigned type of the same width (same
/// element size, so the same layout and counts).
inline DataType ddaKernelDtype(DataType t, RedOpKind op) {
  switch (t) {
    case DataType::i8: return opBit(op) & kDdaInstanceOps<int8_t> ? t : DataType::u8;
    case DataType::i32: return opBit(op) & kDdaInstanceOps<int32_t> ? t : DataType::u32;
    case DataType::i64: return opBit(op) & kDdaInstanceOps<int64_t> ? t : DataType::u64;
    default: return t;
  }
}

namespace detail {
template <class T, class... Rest, class F>
auto dispatchIn(DataType t, const char* kernel, F& f) -> decltype(f.template operator()<T>()) {
  if (t == DtypeOf<T>::value) return f.template operator()<T>();
  if constexpr (sizeof...(Rest) > 0) return dispatchIn<Rest...>(t, kernel, f);
  else
    CCLX_THROW(cclxInternalError, "%s kernel launched with dtype %s, which it does not implement",
               kernel, dtypeName(t));
}
}  // namespace detail

/// Returns f.template operator()<T>() for the T of Ts whose DataType is `t` (e.g. the kernel
/// instance to launch); throws cclxInternalError naming `t` and `kernel` when none is.
template <class... Ts, class F>
auto dispatchDtype(Types<Ts...>, DataType t, const char* kernel, F&& f) {
  return detail::dispatchIn<Ts...>(t, kernel, f);
}

}  // namespace dev
}  // namespace cclx
