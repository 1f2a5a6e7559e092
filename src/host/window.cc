// One-sided windows of CPU comms (core/window/window.h) over host shared memory.
//
// Memory. The registered buffer itself is what peers write: it must lie in a MAP_SHARED mapping
// of a file that still has a name (found in /proc/self/maps: a torch storage shared with the
// file-system strategy, allocShared(), a mapped file in /dev/shm). attach() publishes (path,
// file offset) and every peer maps that file range, so a put is a memcpy into the peer's own
// registered memory and map_remote_tensor is a view of it. Private memory is refused with a
// message saying how to get shared memory (the Python layer moves a torch tensor's storage into
// shared memory before registering it).
//
// Signals. Each window has a control segment per rank, created by newWindow(): line src (64
// bytes) holds the number of signals rank src has sent to this rank, written only by rank src
// (seq_cst fetch_add, so every earlier put of src, a plain memcpy by the same thread, is visible
// to whoever sees the new count), and the futex waiter count 8 bytes after it (HostCtx::addWord /
// waitWord). Waits are counted locally: the k-th waitSignal(src) waits until the count reaches k.
// Counts only grow, so a late waiter never misses a signal.
//
// Failure model. Waits end at the call's deadline (cclxTimeout naming the source) or when the
// source's failure word is set (its abort, or its own timeout), and the comm's transport becomes
// unusable; the registered buffer is then filled with 0xFF bytes (NaN in every float type), so a
// failed wait never leaves plausible data behind. put and signal refuse a destination that failed.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include <cclx/device_window.h>

#include "base/error.h"
#include "base/log.h"
#include "core/failure/watchdog.h"
#include "core/window/window.h"
#include "host/shm.h"
#include "host/window.h"

namespace cclx {

namespace {

constexpr size_t kLine = 64;

size_t pageSize() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

struct Mapping {
  char* base = nullptr;
  size_t bytes = 0;
  void unmap() {
    if (base) munmap(base, bytes);
    base = nullptr;
    bytes = 0;
  }
};

// Maps [off, off + bytes) of the file at `path` (read-write, shared); returns the address of
// byte `off`, or throws cclxSystemError.
char* mapFileRange(const std::string& path, size_t off, size_t bytes, Mapping& m) {
  int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) CCLX_THROW(cclxSystemError, "open(%s) failed: %s", path.c_str(), strerror(errno));
  const size_t head = off % pageSize();
  void* p = mmap(nullptr, bytes + head, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(off - head));
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    CCLX_THROW(cclxSystemError, "mmap(%s, %zu bytes at %zu) failed: %s", path.c_str(), bytes, off,
               strerror(e));
  m.base = static_cast<char*>(p);
  m.bytes = bytes + head;
  return m.base + head;
}

// Creates the new shared-memory object `name` (O_EXCL) of `bytes` bytes and maps it read-write,
// shared. Returns the mapping, or MAP_FAILED after unlinking the name, with `step` naming the call
// that failed ("ftruncate" or "mmap") and `err` its errno. A failed shm_open throws
// cclxSystemError.
void* createMapped(const std::string& name, size_t bytes, const char*& step, int& err) {
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) CCLX_THROW(cclxSystemError, "shm_open(%s): %s", name.c_str(), strerror(errno));
  const bool sized = ftruncate(fd, off_t(bytes)) == 0;
  const int e = errno;
  void* p = sized ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int e2 = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    step = sized ? "mmap" : "ftruncate";
    err = sized ? e2 : e;
  }
  return p;
}

// "rank r: why" for each of ranks 0..n-1 whose exchanged record is empty or a failure ("!why"),
// joined by "; " ("" when there is none).
std::string failedRecords(const std::vector<std::string>& recs, int n) {
  std::string bad;
  for (int r = 0; r < n; ++r)
    if (recs[size_t(r)].empty() || recs[size_t(r)][0] == '!')
      bad += strFormat("%srank %d: %s", bad.empty() ? "" : "; ", r, recs[size_t(r)].c_str() + 1);
  return bad;
}

// The named shared file mapping that holds [ptr, ptr + bytes), as "path\noffset", or throws
// cclxInvalidArgument saying why the memory cannot be shared.
std::string sharedFileOf(const void* ptr, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (!f) CCLX_THROW(cclxSystemError, "cannot read /proc/self/maps: %s", strerror(errno));
  char line[4096];
  std::string found, why = "it is not in any mapping of this process";
  while (std::fgets(line, sizeof(line), f)) {
    unsigned long lo = 0, hi = 0, off = 0;
    char perms[8] = {0};
    int pathAt = 0;
    if (std::sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &lo, &hi, perms, &off, &pathAt) < 4) continue;
    if (a < lo || a >= hi) continue;
    std::string path = pathAt > 0 ? std::string(line + pathAt) : std::string();
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    if (a + bytes > hi)
      why = "it spans more than one mapping";
    else if (perms[3] != 's' || path.empty() || path[0] != '/')
      why = "it is private memory (not a shared file mapping)";
    else if (path.size() > 10 && path.compare(path.size() - 10, 10, " (deleted)") == 0)
      why = "its shared-memory file has no name any more (e.g. torch's file_descriptor sharing)";
    else if (perms[0] != 'r' || perms[1] != 'w')
      why = "its mapping is not readable and writable";
    else
      found = path + "\n" + std::to_string(off + (a - lo));
    break;
  }
  std::fclose(f);
  if (found.empty())
    CCLX_THROW(cclxInvalidArgument,
               "tensor_register: a CPU window needs memory its peers can map, but %s: use a "
               "torch CPU tensor (its storage is moved to shared memory), cclx.empty_shared() "
               "(Python), cclx::allocShared() (C++), cclxMemAllocShared (C), or a MAP_SHARED "
               "mapping of a named file",
               why.c_str());
  return found;
}

class HostWindow final : public WinImpl {
 public:
  HostWindow(std::shared_ptr<HostCtx> ctx, const WinExchange& ex) : ctx_(std::move(ctx)) {
    const int n = ctx_->size, me = ctx_->rank;
    static std::atomic<uint64_t> seq{0};
    ctlBytes_ = (size_t(n) * kLine + pageSize() - 1) / pageSize() * pageSize();
    ctl_.resize(size_t(n));
    waited_.assign(size_t(n), 0);
    peer_.assign(size_t(n), nullptr);
    peerMaps_.resize(size_t(n));
    // This rank's control segment; peers map it by name, then the name goes away.
    const std::string name = strFormat("/cclx-w%d-%llu", int(::getpid()),
                                       (unsigned long long)seq.fetch_add(1));
    std::string mine = name;
    try {
      const char* step = "";
      int err = 0;
      void* p = createMapped(name, ctlBytes_, step, err);
      if (p == MAP_FAILED)
        CCLX_THROW(cclxSystemError, "%s of %s failed: %s", step, name.c_str(), strerror(err));
      ctl_[size_t(me)] = {static_cast<char*>(p), ctlBytes_};
    } catch (const Error& err) {
      mine = std::string("!") + err.what();
    }
    const std::vector<std::string> names = ex("ctl", mine);
    std::string bad = failedRecords(names, n);
    std::string mapped = "1";
    if (bad.empty()) {
      for (int r = 0; r < n && mapped == "1"; ++r) {
        if (r == me) continue;
        try {
          Mapping m;
          mapFileRange("/dev/shm" + names[size_t(r)], 0, ctlBytes_, m);
          ctl_[size_t(r)] = m;
        } catch (const Error& err) {
          mapped = std::string("!") + err.what();
        }
      }
    }
    const std::vector<std::string> oks = ex("ctl-mapped", mapped);
    if (ctl_[size_t(me)].base) shm_unlink(name.c_str());  // every peer that could map it did
    for (int r = 0; r < n; ++r)
      if (oks[size_t(r)] != "1" && bad.find(strFormat("rank %d:", r)) == std::string::npos)
        bad += strFormat("%srank %d: %s", bad.empty() ? "" : "; ", r, oks[size_t(r)].c_str() + 1);
    if (!bad.empty()) {
      unmapControl();
      CCLX_THROW(cclxSystemError, "new_window: the window's control memory failed: %s", bad.c_str());
    }
  }

  ~HostWindow() override {
    release();
    unmapControl();
  }

  const char* transport() const override { return "shm"; }

  void attach(void* ptr, size_t bytes, const WinExchange& ex) override {
    const int n = ctx_->size, me = ctx_->rank;
    std::string mine;
    try {
      mine = sharedFileOf(ptr, bytes);
    } catch (const Error& err) {
      mine = std::string("!") + err.what();
    }
    const std::vector<std::string> recs = ex("data", mine);
    std::string bad = failedRecords(recs, n);
    if (!bad.empty()) CCLX_THROW(cclxInvalidArgument, "%s", bad.c_str());
    std::string ok = "1";
    for (int r = 0; r < n && ok == "1"; ++r) {
      if (r == me) continue;
      const std::string& rec = recs[size_t(r)];
      const size_t nl = rec.find('\n');
      try {
        peer_[size_t(r)] = mapFileRange(rec.substr(0, nl), std::stoull(rec.substr(nl + 1)), bytes,
                                        peerMaps_[size_t(r)]);
      } catch (const Error& err) {
        ok = strFormat("!mapping rank %d's window: %s", r, err.what());
      }
    }
    const std::vector<std::string> oks = ex("mapped", ok);
    for (int r = 0; r < n; ++r)
      if (oks[size_t(r)] != "1")
        bad += strFormat("%srank %d: %s", bad.empty() ? "" : "; ", r, oks[size_t(r)].c_str() + 1);
    if (!bad.empty()) {
      release();
      CCLX_THROW(cclxSystemError, "tensor_register: %s", bad.c_str());
    }
    peer_[size_t(me)] = static_cast<char*>(ptr);
    mine_ = static_cast<char*>(ptr);
    bytes_ = bytes;
  }

  void detach(const WinExchange& ex, bool healthy) override {
    // Puts and signals finish before their call returns: once every rank says "done", nobody
    // writes into anybody's window any more.
    // A failed transport still takes part (the store works), so that no peer waits for it.
    if (healthy) ex("done", "1");
    release();
    if (healthy) ex("closed", "1");
  }

  void release() override {
    for (Mapping& m : peerMaps_) m.unmap();
    std::fill(peer_.begin(), peer_.end(), nullptr);
    mine_ = nullptr;
    bytes_ = 0;
  }

  std::shared_ptr<Work> put(const void* src, size_t bytes, int dst, size_t offset,
                            const CollOptions& o) override {
    ctx_->beginColl("put", o.timeout);
    if (dst != ctx_->rank) ctx_->checkPeer(dst);
    std::memmove(peer_[size_t(dst)] + offset, src, bytes);
    return completedWork();
  }

  std::shared_ptr<Work> signal(int dst, const CollOptions& o) override {
    ctx_->beginColl("signal", o.timeout);
    if (dst != ctx_->rank) ctx_->checkPeer(dst);
    HostCtx::addWord(word(dst, ctx_->rank), 1);
    return completedWork();
  }

  std::shared_ptr<Work> waitSignal(int src, const CollOptions& o) override {
    ctx_->beginColl("wait_signal", o.timeout);
    const uint64_t target = ++waited_[size_t(src)];
    try {
      ctx_->waitWord(src, word(ctx_->rank, src), target, "signal");
    } catch (const Error& e) {
      if (fatalCode(e.code()) && mine_) std::memset(mine_, 0xFF, bytes_);
      throw;
    }
    return completedWork();
  }

  void* peerPtr(int rank) const override { return peer_[size_t(rank)]; }

  // Device windows: the CPU twin of the CUDA transport's. The resource area is shared memory
  // (registered in a window of its own like any other), the handle a host copy. There is no
  // device-side failure model here: the control and error words stay null.
  void* devResAlloc(size_t bytes) override { return allocShared(bytes); }
  void devResFree(void* p) override { freeShared(p); }
  void devFailWords(DeviceWindowComm& c, std::chrono::milliseconds timeout) const override {
    const long long ms = timeout.count();
    const bool none = ms <= 0 || ms >= kInfiniteTimeout.count();
    c.timeoutMs = none ? 0u : uint32_t(std::min<long long>(ms, 0xFFFFFFFFll));
    c.timeoutNs = none ? 0u : uint64_t(ms) * 1000000ull;
  }
  void* devHandlePlace(const DeviceWindowHandle& h) override {
    auto* p = new DeviceWindowHandle;
    std::memcpy(static_cast<void*>(p), &h, sizeof(h));  // byte for byte, as CUDA's copy
    return p;
  }
  void devHandleFree(void* p) override { delete static_cast<DeviceWindowHandle*>(p); }
  // A peer's mapping of the area outlives this rank's unmapping and unlinking.
  void devAbandon(void* mem, void* handle) override {
    devResFree(mem);
    devHandleFree(handle);
  }

 private:
  // Rank `owner`'s count of signals from rank `src`.
  uint64_t* word(int owner, int src) const {
    return reinterpret_cast<uint64_t*>(ctl_[size_t(owner)].base + size_t(src) * kLine);
  }
  void unmapControl() {
    for (Mapping& m : ctl_) m.unmap();
  }

  std::shared_ptr<HostCtx> ctx_;
  size_t ctlBytes_ = 0;
  std::vector<Mapping> ctl_;        // every rank's control segment as mapped here
  std::vector<uint64_t> waited_;    // signals consumed per source
  std::vector<char*> peer_;         // every rank's window as addressed here
  std::vector<Mapping> peerMaps_;
  char* mine_ = nullptr;
  size_t bytes_ = 0;
};

// allocShared(): the names of the files behind each allocation, removed by freeShared().
struct SharedAlloc {
  std::string name;
  size_t bytes;
};
std::mutex gAllocMu;
std::map<void*, SharedAlloc>& allocs() {
  static auto* m = new std::map<void*, SharedAlloc>();
  return *m;
}

}  // namespace

std::unique_ptr<WinImpl> makeHostWindow(std::shared_ptr<HostCtx> ctx, const WinExchange& ex) {
  return std::make_unique<HostWindow>(std::move(ctx), ex);
}

void* allocShared(size_t bytes) {
  CCLX_ARG_CHECK(bytes > 0, "allocShared: size is 0");
  static std::atomic<uint64_t> seq{0};
  const std::string name = strFormat("/cclx-mem-%d-%llu", int(::getpid()),
                                     (unsigned long long)seq.fetch_add(1));
  const char* step = "";
  int err = 0;
  void* p = createMapped(name, bytes, step, err);
  if (p == MAP_FAILED)
    CCLX_THROW(cclxSystemError, "allocShared(%zu): %s failed: %s", bytes, step, strerror(err));
  std::lock_guard<std::mutex> g(gAllocMu);
  allocs()[p] = {name, bytes};
  return p;
}

void freeShared(void* ptr) {
  if (!ptr) return;
  SharedAlloc a;
  {
    std::lock_guard<std::mutex> g(gAllocMu);
    auto it = allocs().find(ptr);
    CCLX_ARG_CHECK(it != allocs().end(), "freeShared: %p was not returned by allocShared", ptr);
    a = it->second;
    allocs().erase(it);
  }
  munmap(ptr, a.bytes);
  shm_unlink(a.name.c_str());
}

}  // namespace cclx
