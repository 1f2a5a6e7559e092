// The algorithm interface: one algorithm per file, each answering "can I run these arguments?"
// and "run them". Backends keep an ordered list and take the first that accepts, unless the
// selection table (see docs/DESIGN.md) or an override names one.
#pragma once

#include "core/backend.h"

namespace cclx {

struct HostCtx;    // src/transport/shm.h: this rank's view of the host shared-memory transport
struct DeviceCtx;  // src/algos/device_ctx.h (CUDA builds): peer memory, stream, device facts

class HostAlgo {
 public:
  virtual ~HostAlgo() = default;
  virtual const char* name() const = 0;
  virtual bool canRun(const CollArgs& args, const HostCtx& ctx) const = 0;
  /// Runs the collective to completion on the calling thread.
  virtual void run(const CollArgs& args, HostCtx& ctx) = 0;
};

class DeviceAlgo {
 public:
  virtual ~DeviceAlgo() = default;
  virtual const char* name() const = 0;
  virtual bool canRun(const CollArgs& args, const DeviceCtx& ctx) const = 0;
  /// Enqueues the collective on `stream` (a cudaStream_t). No host synchronization, no
  /// allocation: must be legal inside CUDA-graph capture.
  virtual void launch(const CollArgs& args, DeviceCtx& ctx, void* stream) = 0;
};

}  // namespace cclx
