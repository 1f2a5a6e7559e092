// The contract between MoeBuffer (core/moe/buffer.cc: validation, the route, peer mapping through
// a window, the life cycle) and the engine of a backend that runs its dispatch and combine: the
// CUDA kernels (gpu/moe) or the CPU twin (host/moe.cc). An engine receives validated calls.
#pragma once

#include <cclx/moe.hpp>

#include <chrono>
#include <cstddef>
#include <string>

#include "core/moe/layout.h"

namespace cclx {

/// The halves of a dispatch an engine runs in one call: both (the default), the send (credits,
/// routing, headers, rows and slot records to every destination) or the receive (every source's
/// header and slots, this rank's entries). A receive follows its send on every rank.
enum MoePhase : int { kMoeSend = 1, kMoeRecv = 2, kMoeBoth = 3 };

/// One dispatch or combine call (validated by MoeBuffer).
struct MoeCall {
  // dispatch
  const void* x = nullptr;
  const void* ids = nullptr;     // int32 or int64 [tokens][k]
  bool ids64 = false;
  const float* w = nullptr;      // f32 [tokens][k]
  bool cached = false;           // ids / w: the buffer's copy of the last dispatch's
  int phase = kMoeBoth;          // MoePhase (a receive carries no x / ids / w)
  // combine
  const void* eout = nullptr;
  size_t eoutRows = 0;
  void* out = nullptr;
  // both
  int tokens = 0;                // this rank's T (combine: the last dispatch's)
  void* stream = nullptr;
  std::chrono::milliseconds timeout{0};  // resolved (never 0)
};

/// What a backend's engine does for a MoeBuffer. Memory: base() is this rank's allocation of
/// layout.total bytes, zeroed, which peers map (a window registers it); attach() hands every
/// rank's memory as mapped here (peers[rank] == base()).
class MoeEngine {
 public:
  virtual ~MoeEngine() = default;
  virtual MoeRoute route() const = 0;
  virtual void* base() const = 0;
  /// After every rank mapped every other's memory (MoeBuffer::create).
  virtual void attach(char* const* peers) = 0;
  virtual void dispatch(const MoeCall& c) = 0;
  virtual void combine(const MoeCall& c) = 0;
  /// Blocks of a launch (0: not a GPU engine).
  virtual int blocks() const { return 0; }
  /// Tokens per routing chunk of a dispatch (0: not a GPU engine).
  virtual int chunkTokens() const { return 0; }
  /// Frees this rank's memory once no peer maps it any more (healthy: MoeBuffer::destroy after
  /// the window's deregistration); otherwise leaves it allocated (logged) and forgets it.
  virtual void release(bool healthy) = 0;
};

}  // namespace cclx
