// Device windows (include/cclx/device_window.h; docs/design/device-window.md): the host side of
// Window::deviceWindow(), the same for every transport that has them (CUDA IPC; host shared
// memory as the CPU twin).
//
// Creation (collective, the first call after a registration): the ranks exchange their counts
// ("dw<attempt>/cfg": a disagreement fails on every rank, naming the ranks; then counts out of
// range fail on every rank alike, as every rank checks the same records), each allocates its
// resource area (the transport's devResAlloc, zeroed) and says whether it could ("alloc": one
// failure fails every rank, naming it), and the areas are registered in a window of their own (an
// ordinary window of the same comm: the transport exports and maps them as it does any window, so
// every rank addresses every peer's area). The handle is then built from both windows' mappings
// and the transport's failure words, and placed where kernels read it (device memory). Nothing
// of it changes afterwards: kernels keep all state (signals, counters, barrier counts, the
// failure word) in the resource areas, so CUDA graphs replay it with no host involvement.
//
// Release (deregistration, collective): this rank's device work completes (devQuiesce), the
// resources' window is deregistered (every rank done, every mapping closed, every rank says so),
// and only then is the area freed, so no peer ever maps freed memory. A window destroyed without
// deregistration, or a failed comm, releases this rank's mappings only and leaves the area and
// the handle to the transport (devAbandon: CUDA keeps them allocated, since a kernel or a peer
// may still use them; host shared memory frees them, since a peer's mapping outlives the free).
#include <cclx/cclx.hpp>
#include <cclx/device_window.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "core/comm/comm_internal.h"
#include "core/window/window.h"

namespace cclx {

// The defaults of WinImpl: a transport without device windows.
void* WinImpl::devResAlloc(size_t) {
  CCLX_THROW(cclxUnsupported,
             "get_device_window: transport %s has no device windows (they need peer memory: "
             "the GPUs of one host, CUDA IPC)", transport());
}
void WinImpl::devResFree(void*) {}
void WinImpl::devFailWords(DeviceWindowComm&, std::chrono::milliseconds) const {}
void* WinImpl::devHandlePlace(const DeviceWindowHandle&) {
  CCLX_THROW(cclxUnsupported, "get_device_window: transport %s has no device windows",
             transport());
}
void WinImpl::devHandleFree(void*) {}

namespace {

// "<signals> signals, <counters> counters, <barriers> barriers": what the ranks must agree on.
std::string countsOf(int s, int c, int b) {
  return strFormat("%d signals, %d counters, %d barriers", s, c, b);
}

// The handle of this rank: both windows' mappings, the layout, the transport's failure words.
DeviceWindowHandle buildHandle(Window::State& w, const DevWinState& d,
                               const DeviceWindowLayout& l) {
  const CommState& cs = *w.cs;
  const int n = cs.info.size;
  DeviceWindowHandle h;
  std::memset(&h, 0, sizeof(h));  // padding too: the bytes are copied to the device as they are
  DeviceWindowComm& c = h.comm;
  c.rank = cs.info.rank;
  c.size = n;
  c.signalCount = d.signals;
  c.counterCount = d.counters;
  c.barrierCount = d.barriers;
  c.stateOffset = l.stateOffset;
  c.signalOffset = l.signalOffset;
  c.barrierOffset = l.barrierOffset;
  c.counterOffset = l.counterOffset;
  c.epochOffset = l.epochOffset;
  c.windowBytes = w.count * dtypeSize(w.dtype);
  w.impl->devFailWords(c, cs.info.opts.timeout);
  for (int r = 0; r < n; ++r) {
    c.res[r] = static_cast<char*>(d.res->remotePtr(r));
    h.window.base[r] = static_cast<char*>(w.impl->peerPtr(r));
    CCLX_REQUIRE(c.res[r] && h.window.base[r], cclxUnsupported,
                 "get_device_window: rank %d's memory is not directly accessible from rank %d",
                 r, c.rank);
  }
  h.base = w.ptr;
  h.size = size_t(c.windowBytes);
  h.rank = c.rank;
  h.numRanks = n;
  h.signalBufferHandle = 0;
  h.ginEnabled = false;
  return h;
}

}  // namespace

void* Window::deviceWindow(int signalCount, int counterCount, int barrierCount) {
  State& w = *st_;
  CommState& cs = *w.cs;
  const char* op = "get_device_window";
  requireUsable(cs, op);
  winRequireRegistered(w, op);
  const int n = cs.info.size;
  const int s = signalCount < 0 ? n : signalCount;
  const int c = counterCount < 0 ? n : counterCount;
  const int b = barrierCount;
  if (w.dev) {  // the existing handle serves every id the caller may use (local: no exchange)
    const DevWinState& d = *w.dev;
    CCLX_ARG_CHECK(s <= d.signals && c <= d.counters && b <= d.barriers,
                   "%s: window #%d's device window has %s; this call asks for %s (a device "
                   "window is made once per registration)",
                   op, w.id, countsOf(d.signals, d.counters, d.barriers).c_str(),
                   countsOf(s, c, b).c_str());
    return d.placed;
  }
  CCLX_REQUIRE(n <= kDevWinMaxRanks, cclxUnsupported,
               "%s: device windows span at most %d ranks; comm '%s' has %d", op, kDevWinMaxRanks,
               cs.info.opts.name.c_str(), n);

  // The counts go through the store before anything is checked, so that every rank reaches the
  // same verdict on the same records. Each attempt has keys of its own.
  const WinExchange ex = w.exchange(strFormat("r%d/dw%d/", w.gen - 1, w.devTries++));
  const std::vector<std::string> cfg =
      winGuarded(cs, op, [&] { return ex("cfg", countsOf(s, c, b)); });
  for (const std::string& r : cfg)
    if (r != cfg[0])
      CCLX_THROW(cclxInvalidArgument, "%s: every rank must ask for the same counts; %s", op,
                 winDisagreement(cfg).c_str());
  CCLX_ARG_CHECK(s <= kDevWinMaxIds && c <= kDevWinMaxIds,
                 "%s: signal_count %d and counter_count %d must be at most %d", op, signalCount,
                 counterCount, kDevWinMaxIds);
  CCLX_ARG_CHECK(b >= 0 && b <= kDevWinMaxIds, "%s: barrier_count %d is outside [0, %d]", op,
                 barrierCount, kDevWinMaxIds);

  auto d = std::make_unique<DevWinState>();
  d->signals = s;
  d->counters = c;
  d->barriers = b;
  const DeviceWindowLayout l = deviceWindowLayout(n, s, c, b);
  std::string mine = "1";  // or "!<cclxResult_t>:<why>"
  try {
    d->mem = w.impl->devResAlloc(l.bytes);
  } catch (const Error& e) {
    mine = strFormat("!%d:%s", int(e.code()), e.what());
  }
  const std::vector<std::string> alloc = winGuarded(cs, op, [&] { return ex("alloc", mine); });
  std::string bad;
  int code = cclxSuccess;
  for (size_t r = 0; r < alloc.size(); ++r) {
    if (alloc[r] == "1") continue;
    const size_t colon = alloc[r].find(':');
    if (code == cclxSuccess) code = colon == std::string::npos ? cclxInternalError : std::atoi(alloc[r].c_str() + 1);
    bad += strFormat("%srank %zu: %s", bad.empty() ? "" : "; ", r,
                     colon == std::string::npos ? "?" : alloc[r].c_str() + colon + 1);
  }
  if (!bad.empty()) {
    if (d->mem) w.impl->devResFree(d->mem);  // nobody mapped it
    CCLX_THROW(cclxResult_t(code), "%s: %s", op, bad.c_str());
  }

  try {
    d->res = w.comm->newWindow();
    d->res->registerBuffer(d->mem, l.bytes, DataType::u8);
  } catch (...) {
    // The registration's own verdict was collective: no peer maps this area any more.
    d->res.reset();
    w.impl->devResFree(d->mem);
    throw;
  }
  d->handle = buildHandle(w, *d, l);
  d->placed = winGuarded(cs, op, [&] { return w.impl->devHandlePlace(d->handle); });
  CCLX_INFO("window #%d of comm '%s': device window (%s, %zu bytes of resources per rank)", w.id,
            cs.info.opts.name.c_str(), countsOf(s, c, b).c_str(), l.bytes);
  w.dev = std::move(d);
  return w.dev->placed;
}

const DeviceWindowHandle& Window::deviceWindowHandle() const {
  CCLX_REQUIRE(st_->dev != nullptr, cclxInvalidUsage,
               "device window handle: window #%d has none (call deviceWindow() after "
               "registerBuffer())", st_->id);
  return st_->dev->handle;
}

void devWinRelease(Window::State& w, bool collective) {
  std::unique_ptr<DevWinState> d = std::move(w.dev);
  if (!d) return;
  if (!collective) {  // this rank's mappings only (the resources' window lets go of them)
    try {
      d->res.reset();
      w.impl->devAbandon(d->mem, d->placed);
    } catch (const std::exception& e) {
      CCLX_WARN("window #%d: device window teardown: %s", w.id, e.what());
    }
    return;
  }
  w.impl->devQuiesce();
  try {
    d->res->deregisterBuffer();  // every rank done with every area, every mapping closed
  } catch (...) {
    d->res.reset();  // memory left allocated: a peer may still map it
    throw;
  }
  d->res.reset();
  w.impl->devResFree(d->mem);
  w.impl->devHandleFree(d->placed);
}

}  // namespace cclx
