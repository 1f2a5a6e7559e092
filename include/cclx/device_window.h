// cclx device windows: the handle a kernel receives for one-sided communication on a cclx window
// (torchcomms' TorchCommDeviceWindow with a cclx backend). Plain C++ (no CUDA headers): the
// handle's layout, its limits, the status codes of its device methods and the layout of the
// per-rank resource area. The device methods are in <cclx/device_window.cuh> (cclx's own names)
// and <cclx/torchcomms/device_window.cuh> (torchcomms' names); the host side is
// Window::deviceWindow() (include/cclx/cclx.hpp). Design: docs/design/device-window.md.
//
// Layout contract: DeviceWindowHandle has the member sequence of
// torchcomms::device::TorchCommDeviceWindow<Backend> with Backend::Comm = DeviceWindowComm and
// Backend::Window = DeviceWindowPeers (comm_, window_, base_, size_, rank_, num_ranks_,
// signal_buffer_handle_, gin_enabled_), so one object in device memory serves both APIs;
// <cclx/torchcomms/device_window.hpp> checks it member by member at compile time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cclx {

/// Ranks a device window spans at most (peer memory's limit).
constexpr int kDevWinMaxRanks = 8;
/// Signals, counters and barriers a device window may have (each).
constexpr int kDevWinMaxIds = 1 << 16;

/// What a device method returns.
enum DevWinStatus : int {
  kDevWinOk = 0,
  /// A bad argument (a rank, an id or a byte range outside the window, an unknown operation):
  /// nothing was done.
  kDevWinInvalid = -1,
  /// The window failed: a wait passed the comm's timeout, the comm was aborted (by this rank's
  /// host or any rank's failure), or an earlier call of this window failed. Nothing is pushed to
  /// a peer any more; a failed wait poisoned this rank's window (0xFF bytes). The host sees why
  /// through the comm's error words (its next call, a Work query or the watchdog raise it).
  kDevWinFailed = -2,
};

/// Comparisons of wait_signal / wait_counter (torchcomms' CmpOp): `current <op> value`.
enum class DevCmp : int { EQ = 0, NE = 1, LT = 2, LE = 3, GT = 4, GE = 5 };
/// How signal() changes the destination's slot (torchcomms' SignalOp).
enum class DevSignalOp : int { SET = 0, ADD = 1 };
/// Which threads call a method together (torchcomms' CoopScope): one thread, a whole warp (32
/// lanes, converged), or every thread of the block.
enum class DevScope : int { THREAD = 0, WARP = 1, BLOCK = 2 };

/// One rank's resource area (device memory of that rank, mapped by every peer), byte offsets:
///   [stateOffset]    uint32 failure word of this window on this rank (0: healthy; local)
///   [signalOffset]   uint64 signals[signalCount][size]: slot [s][r] is added to / set by rank r
///   [barrierOffset]  uint64 arrivals[barrierCount][size]: slot [b][r] = rank r's barrier b count
///   [counterOffset]  uint64 counters[counterCount] (local)
///   [epochOffset]    uint64 barriers done[barrierCount] by this rank (local)
/// Sections start on 64-byte boundaries; `bytes` is a multiple of 256. Everything starts at 0.
struct DeviceWindowLayout {
  size_t stateOffset = 0, signalOffset = 0, barrierOffset = 0, counterOffset = 0,
         epochOffset = 0, bytes = 0;
};

/// The layout of `size` ranks with these counts (each in [0, kDevWinMaxIds]; size in
/// [1, kDevWinMaxRanks]; the caller checks).
inline DeviceWindowLayout deviceWindowLayout(int size, int signals, int counters, int barriers) {
  auto up = [](size_t v, size_t a) { return (v + a - 1) / a * a; };
  DeviceWindowLayout l;
  l.stateOffset = 0;
  l.signalOffset = 64;
  l.barrierOffset = up(l.signalOffset + size_t(signals) * size_t(size) * 8, 64);
  l.counterOffset = up(l.barrierOffset + size_t(barriers) * size_t(size) * 8, 64);
  l.epochOffset = up(l.counterOffset + size_t(counters) * 8, 64);
  l.bytes = up(l.epochOffset + size_t(barriers) * 8, 256);
  return l;
}

/// The communicator part of a device window (torchcomms' Backend::Comm), passed by value inside
/// the handle. Written once by the host; kernels never change it.
struct DeviceWindowComm {
  // The failure model (as every cclx peer kernel's): the comm's control words (abort word) of
  // every rank as mapped here, this rank's host-mapped error words, the comm's timeout.
  uint32_t* ctl[kDevWinMaxRanks];
  uint32_t* err;
  uint64_t timeoutNs;  // device-timer ns a wait may take; 0: no deadline (abort only)
  uint32_t timeoutMs;  // the same in ms (error messages)
  int32_t rank, size;
  int32_t signalCount, counterCount, barrierCount;
  char* res[kDevWinMaxRanks];  // every rank's resource area as mapped here
  uint64_t stateOffset, signalOffset, barrierOffset, counterOffset, epochOffset;
  uint64_t windowBytes;        // bytes of every rank's window
};

/// The window part (torchcomms' Backend::Window): every rank's window as mapped here (the peers'
/// through CUDA IPC), null beyond the comm's size.
struct DeviceWindowPeers {
  char* base[kDevWinMaxRanks];
};

/// What Window::deviceWindow() places in device memory and returns the address of.
struct DeviceWindowHandle {
  DeviceWindowComm comm;
  DeviceWindowPeers window;
  void* base;                  // this rank's window
  size_t size;                 // its bytes
  int rank;
  int numRanks;
  uint32_t signalBufferHandle;  // 0 (no NCCL resource buffer)
  bool ginEnabled;              // false (no GPU-initiated networking)
};

}  // namespace cclx
