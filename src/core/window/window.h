// The internal contract between Window (core/window/window.cc: validation, registration agreement,
// error handling) and a backend's window transport (host shared memory: host/window.cc; CUDA IPC:
// gpu/window/; NCCL's one-sided API: gpu/nccl/window.cc). A transport receives arguments that
// Window already validated (ranks in range, bounds checked, a buffer registered where needed).
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace cclx {

struct DeviceWindowComm;    // <cclx/device_window.h>
struct DeviceWindowHandle;

/// Every rank calls it with the same tag and gets every rank's value (index = rank), through the
/// comm's store under the window's keys; a rank that never arrives fails it with cclxTimeout
/// naming the rank.
using WinExchange = std::function<std::vector<std::string>(const std::string& tag,
                                                           const std::string& mine)>;

class WinImpl {
 public:
  virtual ~WinImpl() = default;
  virtual const char* transport() const = 0;
  /// Collective: [ptr, ptr + bytes) becomes this rank's window memory; every peer's is mapped
  /// where it can be. Every rank reaches the same verdict: a failure on one rank throws on all
  /// (the ranks exchange a verdict before anything is kept).
  virtual void attach(void* ptr, size_t bytes, const WinExchange& ex) = 0;
  /// Collective: this rank's operations on the window complete, every rank says so, then peers'
  /// memory is unmapped and every rank says that too (so no rank frees memory a peer still maps).
  /// On a failed comm: local release only, no exchange.
  virtual void detach(const WinExchange& ex, bool healthy) = 0;
  /// Local release of what attach() mapped (a Window destroyed while registered).
  virtual void release() = 0;
  virtual std::shared_ptr<Work> put(const void* src, size_t bytes, int dst, size_t offset,
                                    const CollOptions& o) = 0;
  virtual std::shared_ptr<Work> signal(int dst, const CollOptions& o) = 0;
  virtual std::shared_ptr<Work> waitSignal(int src, const CollOptions& o) = 0;
  /// Rank `rank`'s window memory as mapped in this process; nullptr when not directly accessible.
  virtual void* peerPtr(int rank) const = 0;

  // Device windows (core/window/device_window.cc). The defaults: this transport has none.
  /// `bytes` zeroed bytes of memory this transport can register in a window of its own (the
  /// device window's resource area, which every peer maps); throws cclxUnsupported where device
  /// windows do not exist, and the error of a failed allocation.
  virtual void* devResAlloc(size_t bytes);
  /// Frees devResAlloc's memory (no peer maps it any more).
  virtual void devResFree(void* p);
  /// Blocks until this rank's device work that may use a device window of this window is done.
  virtual void devQuiesce() {}
  /// The failure part of a device window's comm (control and error words, the timeout).
  virtual void devFailWords(DeviceWindowComm& c, std::chrono::milliseconds timeout) const;
  /// Copies the handle to where kernels read it (device memory) and returns that address;
  /// devHandleFree releases it.
  virtual void* devHandlePlace(const DeviceWindowHandle& h);
  virtual void devHandleFree(void* p);
  /// This rank lets go of its resource area and handle without the peers (a window destroyed
  /// while registered, a failed comm): a transport whose peers' mappings outlive a free frees
  /// them; the default leaves both allocated (a peer or a kernel may still use them).
  virtual void devAbandon(void* mem, void* handle) {}
};

}  // namespace cclx
