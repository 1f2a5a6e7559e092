// Shared device code of the DDA kernels: unaligned-safe user-buffer access in 8/16-byte units and
// the element reduction (src/core/elements/dtype_math.h: prepare, combine in rank order 0..N-1, finish,
// round once), so every rank computes the same bits as the host transport.
#pragma once


#include <cstdint>
#include <type_traits>

#include "gpu/dda/dda.h"
#include "gpu/device/dtype_dispatch.h"
#include "gpu/device/launch.cuh"
#include "gpu/device/peer_kernel.cuh"
#include "gpu/device/prims.cuh"
#include "gpu/device/sync.cuh"
#include "core/elements/dtype_math.h"
#include "base/error.h"
#include "gpu/resources.h"
#include "gpu/runtime.h"

namespace cclx {
namespace dev {

/// Peer pointers handed to kernels by value.
struct PeerPtrs {
  char* staging[kMaxRanks];  // region base (flat or tree) of every rank's staging
  char* signal[kMaxRanks];   // region base (barrier or tree) of every rank's signal area
};

/// Bytes of unit u (W bytes each) inside a message of `total` bytes: W except for the tail.
template <int W>
__device__ __forceinline__ int validBytes(size_t total, size_t u) {
  size_t left = total - u * W;
  return left < size_t(W) ? int(left) : W;
}

/// Loads `valid` (<= W) bytes at p into a W-byte unit (rest zero); never touches bytes beyond
/// p + valid. Uses the widest access p's alignment allows.
template <int W>
__device__ __forceinline__ void loadUnit(const char* p, int valid, uint32_t (&w)[W / 4]) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (valid == W) {
    if (W == 16 && (a & 15) == 0) {
      uint4 v = *reinterpret_cast<const uint4*>(p);
      w[0] = v.x, w[1] = v.y, w[2 % (W / 4)] = v.z, w[3 % (W / 4)] = v.w;
      return;
    }
    if ((a & 7) == 0) {
#pragma unroll
      for (int i = 0; i < W / 8; ++i) {
        uint2 v = reinterpret_cast<const uint2*>(p)[i];
        w[2 * i] = v.x, w[2 * i + 1] = v.y;
      }
      return;
    }
    if ((a & 3) == 0) {
#pragma unroll
      for (int i = 0; i < W / 4; ++i) w[i] = reinterpret_cast<const uint32_t*>(p)[i];
      return;
    }
  }
  uint8_t b[W];
#pragma unroll
  for (int i = 0; i < W; ++i) b[i] = i < valid ? reinterpret_cast<const uint8_t*>(p)[i] : 0;
#pragma unroll
  for (int i = 0; i < W / 4; ++i)
    w[i] = uint32_t(b[4 * i]) | uint32_t(b[4 * i + 1]) << 8 | uint32_t(b[4 * i + 2]) << 16 |
           uint32_t(b[4 * i + 3]) << 24;
}

/// Stores the first `valid` (<= W) bytes of a unit at p; never writes beyond p + valid.
template <int W>
__device__ __forceinline__ void storeUnit(char* p, int valid, const uint32_t (&w)[W / 4]) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (valid == W) {
    if (W == 16 && (a & 15) == 0) {
      *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2 % (W / 4)], w[3 % (W / 4)]);
      return;
    }
    if ((a & 7) == 0) {
#pragma unroll
      for (int i = 0; i < W / 8; ++i) reinterpret_cast<uint2*>(p)[i] = make_uint2(w[2 * i], w[2 * i + 1]);
      return;
    }
    if ((a & 3) == 0) {
#pragma unroll
      for (int i = 0; i < W / 4; ++i) reinterpret_cast<uint32_t*>(p)[i] = w[i];
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < W; ++i)
    if (i < valid) reinterpret_cast<uint8_t*>(p)[i] = uint8_t(w[i / 4] >> (8 * (i % 4)));
}

template <class A>
__device__ __forceinline__ A mulRn(A a, A b) {
  if constexpr (std::is_same_v<A, float>) return __fmul_rn(a, b);
  else if constexpr (std::is_same_v<A, double>) return __dmul_rn(a, b);
  else return math::mul(a, b);
}

/// The runtime part of a call's reduction for the instance of Op (dispatchOp): the SUM instance
/// also runs AVG (the reduced value divided by the rank count once) and PREMUL_SUM (each rank's
/// value times the factor as it is loaded), so those two have no instance of their own.
template <class T, RedOpKind Op>
struct RedRt {
  using A = typename math::AccOf<T>::type;
  A factor;
  bool scale, average;
  __device__ __forceinline__ RedRt(RedOpKind op, double f)
      : factor(op == RedOpKind::PREMUL_SUM ? A(f) : A(1)),
        scale(Op == RedOpKind::SUM && op == RedOpKind::PREMUL_SUM),
        average(Op == RedOpKind::SUM && op == RedOpKind::AVG) {}
};

/// Per-unit accumulator of W bytes of T elements.
template <class T, RedOpKind Op, int W>
struct UnitAcc {
  using A = typename math::AccOf<T>::type;
  static constexpr int kN = W / int(sizeof(T));
  A acc[kN];
  __device__ __forceinline__ static T elem(const uint32_t (&w)[W / 4], int i) {
    T t;
    memcpy(&t, reinterpret_cast<const char*>(w) + i * sizeof(T), sizeof(T));
    return t;
  }
  /// Rank order: call with rank 0's unit first (first = true), then ranks 1..N-1. The runtime
  /// choices are made once per unit (a branch every thread of the call takes the same way), never
  /// per element.
  __device__ __forceinline__ void add(const uint32_t (&w)[W / 4], bool first, const RedRt<T, Op>& rt) {
    if (rt.scale) addAs<true>(w, first, rt.factor);
    else addAs<false>(w, first, rt.factor);
  }
  __device__ __forceinline__ void result(int nranks, const RedRt<T, Op>& rt, uint32_t (&w)[W / 4]) const {
    if (rt.average) resultAs<true>(nranks, w);
    else resultAs<false>(nranks, w);
  }

 private:
  template <bool Scale>
  __device__ __forceinline__ void addAs(const uint32_t (&w)[W / 4], bool first, A factor) {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      A v = math::load<T>(elem(w, i));
      // prepare(): PREMUL_SUM's product rounded on its own (never fused into the following add),
      // as on the host.
      if constexpr (Scale) v = mulRn(v, factor);
      acc[i] = first ? v : math::combine<Op, A>(acc[i], v);
    }
  }
  template <bool Average>
  __device__ __forceinline__ void resultAs(int nranks, uint32_t (&w)[W / 4]) const {
#pragma unroll
    for (int i = 0; i < kN; ++i) {
      const A a = Average ? math::finish<RedOpKind::AVG, A>(acc[i], nranks) : acc[i];
      T t = math::store<T>(a);
      memcpy(reinterpret_cast<char*>(w) + i * sizeof(T), &t, sizeof(T));
    }
  }
};

/// Calls f.template operator()<Op>() with the instance that runs the runtime op (kDdaInstanceOps,
/// device/dtype_dispatch.h): SUM for SUM, AVG and PREMUL_SUM. An op T's instance has no body for
/// (PRODUCT or a bitwise op of a signed integer type, which the host launches on the unsigned
/// type's instance: ddaKernelDtype) traps: a bug of the launch, never a silent result.
template <class T, class F>
__device__ __forceinline__ void dispatchOp(RedOpKind op, F&& f) {
  constexpr uint32_t kOps = kDdaInstanceOps<T>;
  switch (op) {
    case RedOpKind::SUM:
    case RedOpKind::AVG:
    case RedOpKind::PREMUL_SUM: f.template operator()<RedOpKind::SUM>(); return;
    case RedOpKind::MIN: f.template operator()<RedOpKind::MIN>(); return;
    case RedOpKind::MAX: f.template operator()<RedOpKind::MAX>(); return;
    case RedOpKind::PRODUCT:
      if constexpr ((kOps & opBit(RedOpKind::PRODUCT)) != 0) {
        f.template operator()<RedOpKind::PRODUCT>();
        return;
      }
      break;
    case RedOpKind::BAND:
    case RedOpKind::BOR:
    case RedOpKind::BXOR:
      if constexpr ((kOps & opBit(RedOpKind::BAND)) != 0) {
        if (op == RedOpKind::BAND) f.template operator()<RedOpKind::BAND>();
        else if (op == RedOpKind::BOR) f.template operator()<RedOpKind::BOR>();
        else f.template operator()<RedOpKind::BXOR>();
        return;
      }
      break;
  }
  trap();
}

/// Host: fills the fields that every DDA kernel's parameter struct has under the same names (the
/// call's buffers, size, op, this rank, the failure parameters and the kernel's counters).
template <class P>
void fillCallParams(P& p, const CollArgs& a, const DeviceCtx& ctx, int counterBase) {
  p.send = static_cast<const char*>(a.send);
  p.recv = static_cast<char*>(a.recv);
  p.bytes = a.count * dtypeSize(a.dtype);
  p.counters = ctx.counters + counterBase;
  p.fail = failParams(a, ctx);
  p.rank = ctx.rank;
  p.size = ctx.size;
  p.op = a.op.kind;
  p.factor = a.op.factor;
}

/// Host: both user buffers 16-byte aligned.
inline bool aligned16(const CollArgs& a) {
  return ((reinterpret_cast<uintptr_t>(a.send) | reinterpret_cast<uintptr_t>(a.recv)) & 15) == 0;
}

}  // namespace dev
}  // namespace cclx
