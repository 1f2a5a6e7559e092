// The data-as-flag ("Lamport") protocol's element rules, shared by the GPU kernel
// (dda_lamport.cu) and the host transport's twin (host_lamport_allreduce.cc).
//
// An inbox word whose element bits are all ones is "empty": inboxes start filled with 0xFF bytes,
// the reader polls until no element of a 16-byte vector is all ones, and then writes the ones
// back. All ones is a NaN in f16, bf16, f32 and f64, so a sender replaces an element equal to it
// by all ones minus one (still a NaN of the same sign): only the payload of that one NaN pattern
// changes, and every rank applies the same replacement to its own contribution, so all ranks
// still combine identical values. Elements are checked one by one because a 16-byte store reaches
// a peer as independent 8-byte pieces; 8-byte elements (f64) are whole inside one piece.
#pragma once

#include <cstdint>

#include "core/elements/dtype_math.h"

namespace cclx {
namespace lamport {

constexpr uint64_t kEmpty = ~uint64_t(0);  // one 8-byte piece of an empty inbox

/// True when some S-byte element (S = 2, 4 or 8) of the 8-byte piece w is all ones.
template <int S>
CCLX_HD bool hasEmpty(uint64_t w) {
  static_assert(S == 2 || S == 4 || S == 8, "element size");
  if constexpr (S == 8) {
    return w == kEmpty;
  } else if constexpr (S == 4) {
    return uint32_t(w) == ~0u || uint32_t(w >> 32) == ~0u;
  } else {
    uint64_t t = ~w;  // an all-ones element becomes a zero 16-bit lane
    return ((t - 0x0001000100010001ull) & ~t & 0x8000800080008000ull) != 0;
  }
}

/// The piece with every all-ones S-byte element replaced by all ones minus one.
template <int S>
CCLX_HD uint64_t canon(uint64_t w) {
  if constexpr (S == 8) {
    return w == kEmpty ? kEmpty - 1 : w;
  } else {
    for (int i = 0; i < 8 / S; ++i) {
      const uint64_t mask = (S == 4 ? 0xFFFFFFFFull : 0xFFFFull) << (8 * S * i);
      if ((w & mask) == mask) w &= ~(uint64_t(1) << (8 * S * i));
    }
    return w;
  }
}

/// The LL16 flag of epoch e (the DDA flat kernel's packets carry it in both 4-byte flag words):
/// never 0, the value of never-written (zeroed) slots, and never equal for epochs e and e + 2,
/// which share a slot set (period 2^32 - 1).
CCLX_HD constexpr uint32_t llFlag(uint64_t epoch) {
  return uint32_t(epoch % 0xFFFFFFFFull) + 1u;
}

/// Element types the protocol carries: those whose all-ones pattern is a NaN.
inline bool typeSupported(DataType t) {
  return t == DataType::f16 || t == DataType::bf16 || t == DataType::f32 || t == DataType::f64;
}

}  // namespace lamport
}  // namespace cclx
