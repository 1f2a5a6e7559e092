// Window (include/cclx/cclx.hpp): one-sided put / signal / waitSignal over memory every rank
// registers. This file validates every call, makes the ranks agree on what they register, and
// turns a transport's failure into the comm's (core/failure/watchdog.h); the transports live beside their
// backends (core/window/window.h). Device windows: core/window/device_window.cc.
#include <cclx/cclx.hpp>

#include <cstdint>
#include <map>

#include "core/comm/comm_internal.h"
#include "base/error.h"
#include "base/log.h"
#include "core/failure/watchdog.h"
#include "core/window/window.h"
#include "store/bootstrap.h"

namespace cclx {

WinExchange Window::State::exchange(const std::string& prefix) const {
  CommState* s = cs;
  const int wid = id;
  return [s, wid, prefix](const std::string& tag, const std::string& mine) {
    const BootstrapInfo& i = s->info;
    return storeAllGather(*i.store, strFormat("win/%d/%s%s", wid, prefix.c_str(), tag.c_str()),
                          mine, i.rank, i.size, i.opts.timeout,
                          strFormat("window #%d (%s%s) of comm '%s'", wid, prefix.c_str(),
                                    tag.c_str(), i.opts.name.c_str()));
  };
}

std::unique_ptr<WinImpl> Backend::newWindow(const WinExchange&) {
  CCLX_THROW(cclxUnsupported, "the %s backend has no one-sided windows", name());
}

namespace {

void checkPeer(const CommState& cs, const char* op, const char* what, int r) {
  CCLX_ARG_CHECK(r >= 0 && r < cs.info.size, "%s: %s %d is outside [0, %d)", op, what, r,
                 cs.info.size);
}

CollOptions resolved(const CommState& cs, const CollOptions& o) {
  CCLX_ARG_CHECK(o.timeout.count() >= 0, "timeout must not be negative (got %lld ms)",
                 (long long)o.timeout.count());
  CollOptions r = o;
  if (r.timeout.count() == 0) r.timeout = cs.info.opts.timeout;
  r.hints = cs.info.opts.hints;
  for (const auto& [k, v] : o.hints) r.hints[k] = v;
  return r;
}

}  // namespace

void winGuardFailed(CommState& cs, const Error& e, const char* op) {
  commFailed(cs, e.code(), e.what(), strFormat("window %s", op));
}

// "ranks 0, 2: 1024 x f32; rank 1: 512 x f32" for the records that differ.
std::string winDisagreement(const std::vector<std::string>& recs) {
  std::map<std::string, std::string> groups;
  std::map<std::string, int> n;
  for (size_t r = 0; r < recs.size(); ++r) {
    std::string& g = groups[recs[r]];
    g += (g.empty() ? "" : ", ") + std::to_string(r);
    ++n[recs[r]];
  }
  std::string out;
  for (const auto& [rec, ranks] : groups)
    out += strFormat("%s%s %s: %s", out.empty() ? "" : "; ", n[rec] > 1 ? "ranks" : "rank",
                     ranks.c_str(), rec.c_str());
  return out;
}

std::shared_ptr<Window> Comm::newWindow() {
  requireUsable(*st_, "new_window");
  auto w = std::make_unique<Window::State>();
  w->comm = shared_from_this();
  w->cs = st_.get();
  w->id = st_->windowSeq++;
  const WinExchange ex = w->exchange("");
  w->impl = winGuarded(*st_, "new_window", [&] { return st_->backend->newWindow(ex); });
  CCLX_INFO("window #%d of comm '%s': %s", w->id, name().c_str(), w->impl->transport());
  return std::make_shared<Window>(std::move(w));
}

Window::Window(std::unique_ptr<State> st) : st_(std::move(st)) {}

Window::~Window() {
  if (!st_ || !st_->impl) return;
  try {
    if (st_->dev) devWinRelease(*st_, false);
    if (st_->registered) st_->impl->release();
    st_->impl.reset();
  } catch (const std::exception& e) {
    CCLX_WARN("window #%d teardown: %s", st_->id, e.what());
  }
}

void Window::registerBuffer(void* ptr, size_t count, DataType dtype) {
  State& w = *st_;
  CommState& cs = *w.cs;
  requireUsable(cs, "tensor_register");
  CCLX_REQUIRE(!w.registered, cclxInvalidUsage,
               "tensor_register: window #%d already has a registered buffer (call "
               "tensor_deregister first)", w.id);
  CCLX_ARG_CHECK(int(dtype) >= 0 && int(dtype) < cclxNumTypes, "tensor_register: unknown data type %d",
                 int(dtype));
  const size_t es = dtypeSize(dtype);
  CCLX_ARG_CHECK(count <= SIZE_MAX / es, "tensor_register: count %zu is too large", count);
  CCLX_ARG_CHECK(ptr != nullptr || count == 0, "tensor_register: the buffer is null");
  // Every rank learns what every other registers before anything is exported: a disagreement
  // fails on every rank alike, with nothing registered anywhere.
  const std::string prefix = strFormat("r%d/", w.gen++);
  const WinExchange ex = w.exchange(prefix);
  const std::vector<std::string> recs = winGuarded(cs, "tensor_register", [&] {
    return ex("size", strFormat("%zu x %s", count, dtypeName(dtype)));
  });
  for (const std::string& r : recs)
    if (r != recs[0])
      CCLX_THROW(cclxInvalidArgument,
                 "tensor_register: every rank must register a buffer of the same size and dtype; "
                 "%s", winDisagreement(recs).c_str());
  CCLX_ARG_CHECK(count > 0, "tensor_register: every rank registered an empty buffer");
  winGuarded(cs, "tensor_register", [&] { w.impl->attach(ptr, count * es, ex); });
  w.registered = true;
  w.ptr = ptr;
  w.count = count;
  w.dtype = dtype;
}

void Window::deregisterBuffer() {
  State& w = *st_;
  CommState& cs = *w.cs;
  CCLX_REQUIRE(w.registered, cclxInvalidUsage,
               "tensor_deregister: window #%d has no registered buffer", w.id);
  const bool usable = !cs.aborted && !cs.finalized;
  try {
    // The device window first: its resources' window is deregistered collectively too.
    if (w.dev) devWinRelease(w, usable);
    const WinExchange ex = w.exchange(strFormat("d%d/", w.gen - 1));
    winGuarded(cs, "tensor_deregister", [&] { w.impl->detach(ex, usable); });
  } catch (...) {
    if (w.dev) devWinRelease(w, false);
    w.impl->release();
    w.registered = false;
    throw;
  }
  w.registered = false;
  w.ptr = nullptr;
  w.count = 0;
}

bool Window::registered() const { return st_->registered; }
void* Window::data() const { return st_->ptr; }
size_t Window::count() const { return st_->count; }
DataType Window::dtype() const { return st_->dtype; }
const char* Window::transport() const { return st_->impl ? st_->impl->transport() : ""; }
const std::shared_ptr<Comm>& Window::comm() const { return st_->comm; }

void winRequireRegistered(const Window::State& w, const char* op) {
  CCLX_REQUIRE(w.registered, cclxInvalidUsage,
               "%s: window #%d has no registered buffer (call tensor_register first)", op, w.id);
}

// signal and wait_signal: the window's checks, then `op` on its transport.
namespace {
template <class Op>
std::shared_ptr<Work> signalOp(Window::State& w, const char* what, const char* arg, int peer,
                               const CollOptions& o, Op&& op) {
  CommState& cs = *w.cs;
  requireUsable(cs, what);
  winRequireRegistered(w, what);
  checkPeer(cs, what, arg, peer);
  const CollOptions co = resolved(cs, o);
  ++cs.opSeq;
  return winGuarded(cs, what, [&] { return op(*w.impl, peer, co); });
}
}  // namespace

std::shared_ptr<Work> Window::put(const void* src, size_t count, int dst, size_t targetOffset,
                                  const CollOptions& o) {
  State& w = *st_;
  CommState& cs = *w.cs;
  requireUsable(cs, "put");
  winRequireRegistered(w, "put");
  checkPeer(cs, "put", "dst_rank", dst);
  CCLX_ARG_CHECK(count <= w.count && targetOffset <= w.count - count,
                 "put: %zu elements at element offset %zu do not fit rank %d's window of %zu "
                 "elements; nothing was written", count, targetOffset, dst, w.count);
  CCLX_ARG_CHECK(src != nullptr || count == 0, "put: the source buffer is null");
  const CollOptions co = resolved(cs, o);
  ++cs.opSeq;
  if (count == 0) return completedWork();
  const size_t es = dtypeSize(w.dtype);
  return winGuarded(cs, "put", [&] { return w.impl->put(src, count * es, dst, targetOffset * es, co); });
}

std::shared_ptr<Work> Window::signal(int dst, const CollOptions& o) {
  return signalOp(*st_, "signal", "dst_rank", dst, o,
                  [](WinImpl& w, int peer, const CollOptions& co) { return w.signal(peer, co); });
}

std::shared_ptr<Work> Window::waitSignal(int src, const CollOptions& o) {
  return signalOp(*st_, "wait_signal", "peer_rank", src, o,
                  [](WinImpl& w, int peer, const CollOptions& co) { return w.waitSignal(peer, co); });
}

void* Window::remotePtr(int rank) const {
  const State& w = *st_;
  requireUsable(*w.cs, "map_remote_tensor");
  winRequireRegistered(w, "map_remote_tensor");
  checkPeer(*w.cs, "map_remote_tensor", "rank", rank);
  void* p = w.impl->peerPtr(rank);
  CCLX_REQUIRE(p != nullptr, cclxUnsupported,
               "map_remote_tensor: rank %d's window is not directly accessible from rank %d "
               "(transport %s; get_attr() says SEPARATE): use put / signal / wait_signal",
               rank, w.cs->info.rank, w.impl->transport());
  return p;
}

WinAccess Window::access(int peer) const {
  const State& w = *st_;
  requireUsable(*w.cs, "get_attr");
  winRequireRegistered(w, "get_attr");
  checkPeer(*w.cs, "get_attr", "peer_rank", peer);
  return w.impl->peerPtr(peer) ? WinAccess::Unified : WinAccess::Separate;
}

}  // namespace cclx
