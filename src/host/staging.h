// User buffers the host algorithms cannot take as they are, replaced by temporaries for one call
// (HostBackend::run). The reductions (and the FP8 forms of the data movement collectives) read
// and write typed elements, so a buffer that is not aligned to its element size is staged in an
// aligned copy; and an input that overlaps the
// output other than by the in-place conventions of cclx.hpp (send == recv; the all-gather input
// at the own block of the output; the reduce-scatter output at the own block of the input) is
// copied first, since the algorithms read inputs while they write outputs (the GPU backend does
// the same). A staged output is copied to the caller's buffer once the algorithm succeeded.
#pragma once

#include <cstdint>
#include <vector>

#include "core/comm/backend.h"

namespace cclx {

class HostStaging {
 public:
  /// `fp8`: the call runs on an FP8 algorithm (which reads its input as elements).
  HostStaging(const CollArgs& a, int rank, int size, bool fp8);
  /// The arguments to run: `a` itself when nothing is staged.
  const CollArgs& args() const { return staged_ ? s_ : a_; }
  /// After the algorithm succeeded: the staged output to the caller's buffer.
  void finish();

 private:
  void* stage(const void* p, size_t bytes, bool copyIn);

  const CollArgs& a_;
  CollArgs s_;
  bool staged_ = false;
  std::vector<std::vector<uint64_t>> bufs_;  // 8-byte aligned: every element type
  void* out_ = nullptr;                      // the caller's output when staged
  const void* outTmp_ = nullptr;
  size_t outBytes_ = 0;
};

}  // namespace cclx
