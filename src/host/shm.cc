// Host shared-memory transport: segment setup/teardown, counters, waits. The synchronization
// contract is written in shm.h and docs/design/transport.md.
#include "host/shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>

#include "base/error.h"
#include "base/log.h"
#include "store/bootstrap.h"

namespace cclx {

namespace {

constexpr size_t kLine = 64;
constexpr uint64_t kMagic = 0x63636c7873686d31ull;  // "cclxshm1"
constexpr size_t kMaxP2pBytes = 256 << 10;
constexpr size_t kMaxLamportBytes = 256 << 10;

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

size_t alignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  if (out.size() > 120) out = out.substr(0, 60) + "_" + std::to_string(std::hash<std::string>{}(s));
  return out;
}

}  // namespace

Range splitRange(size_t count, int n, int i) {
  size_t base = count / size_t(n), extra = count % size_t(n), ui = size_t(i);
  size_t b = ui * base + (ui < extra ? ui : extra);
  return Range{b, b + base + (ui < extra ? 1 : 0)};
}

/// One rank's segment as mapped in this process.
struct ShmSegment {
  std::string name;
  char* base = nullptr;
  size_t bytes = 0;
  bool owner = false;     // created by this process
  bool unlinked = false;  // name removed
  ~ShmSegment() {
    if (base) munmap(base, bytes);
    if (owner && !unlinked) shm_unlink(name.c_str());
  }
  uint64_t* word(int line) const { return reinterpret_cast<uint64_t*>(base + size_t(line) * kLine); }
  uint32_t* waiters(int line) const {
    return reinterpret_cast<uint32_t*>(base + size_t(line) * kLine + 8);
  }
  uint32_t* abortedWord() const { return reinterpret_cast<uint32_t*>(base + 16); }
  // Byte length of the message whose piece `msg` sits in a point-to-point channel (sent lines).
  uint64_t* msgLength(int line, uint64_t msg) const {
    return reinterpret_cast<uint64_t*>(base + size_t(line) * kLine + 16 + (msg & 1) * 8);
  }
};

namespace {

// Line indices (see shm.h).
constexpr int kStepLine = 1;
inline int sentLine(int peer) { return 2 + peer; }
inline int ackedLine(int n, int peer) { return 2 + n + peer; }

size_t slotsOffset(int n) { return alignUp(size_t(2 + 2 * n) * kLine, 4096); }
size_t inboxesOffset(int n, size_t slotBytes, size_t p2pBytes) {
  return slotsOffset(n) + 2 * slotBytes + size_t(n) * 2 * p2pBytes;
}

void publish(const ShmSegment& seg, int line, uint64_t v) {
  std::atomic_ref<uint64_t>(*seg.word(line)).store(v, std::memory_order_seq_cst);
  if (std::atomic_ref<uint32_t>(*seg.waiters(line)).load(std::memory_order_seq_cst) != 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(seg.word(line)), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
  }
}

inline uint64_t loadAcq(const ShmSegment& seg, int line) {
  return std::atomic_ref<uint64_t>(*seg.word(line)).load(std::memory_order_acquire);
}

}  // namespace

HostCtx::HostCtx(const BootstrapInfo& info) : rank(info.rank), size(info.size), cfg(info.cfg) {
  timeout = info.opts.timeout;
  if (cfg.timeoutMs >= 0) timeout = std::chrono::milliseconds(cfg.timeoutMs);
  if (info.numHosts > 1)
    CCLX_THROW(cclxUnsupported,
               "CPU communicator '%s' spans %d hosts: the host shared-memory transport needs every "
               "rank on one host",
               info.opts.name.c_str(), info.numHosts);
  slotBytes_ = alignUp(std::max<size_t>(cfg.shmChunkBytes, 4096), 4096);
  p2pBytes_ = std::min(slotBytes_, kMaxP2pBytes);
  lamportBytes_ = std::min(slotBytes_, kMaxLamportBytes);
  sent_.assign(size_t(size), 0);
  recvd_.assign(size_t(size), 0);
  for (int p = 0; p < size; ++p)
    if (p != rank) others_.push_back(p);
  setup(info);
}

HostCtx::~HostCtx() { release(); }

void HostCtx::release() { segs_.clear(); }

void HostCtx::setup(const BootstrapInfo& info) {
  const size_t lamportOff = inboxesOffset(size, slotBytes_, p2pBytes_);
  const size_t total = lamportOff + 2 * size_t(size - 1) * lamportBytes_;
  segs_.resize(size_t(size));
  auto own = std::make_unique<ShmSegment>();
  own->name = "/cclx-" + sanitize(info.jobId) + "-r" + std::to_string(rank);
  own->bytes = total;
  int fd = shm_open(own->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 && errno == EEXIST) {  // left over by a process that died before unlinking
    shm_unlink(own->name.c_str());
    fd = shm_open(own->name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  }
  if (fd < 0) CCLX_THROW(cclxSystemError, "shm_open(%s) failed: %s", own->name.c_str(), strerror(errno));
  own->owner = true;
  if (ftruncate(fd, off_t(total)) != 0) {
    int e = errno;
    close(fd);
    CCLX_THROW(cclxSystemError, "ftruncate(%s, %zu) failed: %s", own->name.c_str(), total, strerror(e));
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (p == MAP_FAILED) CCLX_THROW(cclxSystemError, "mmap(%s) failed: %s", own->name.c_str(), strerror(e));
  own->base = static_cast<char*>(p);
  reinterpret_cast<uint64_t*>(own->base)[1] = total;
  std::memset(own->base + lamportOff, 0xFF, total - lamportOff);  // inboxes start empty
  std::atomic_ref<uint64_t>(*own->word(0)).store(kMagic, std::memory_order_release);
  const std::string ownName = own->name;
  segs_[size_t(rank)] = std::move(own);

  auto& store = info.store;
  if (!store) CCLX_THROW(cclxInternalError, "host transport: no store in BootstrapInfo");
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[size_t(r)] = r;
  auto waitKeys = [&](const std::string& prefix, const char* what) {
    storeWaitRanks(*store, prefix.substr(0, prefix.size() - 1), all, timeout,
                   strFormat("host transport setup (rank %d of %d): %s", rank, size, what));
  };
  store->set("shm/seg/" + std::to_string(rank), ownName);
  waitKeys("shm/seg/", "publishing the segments");
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    auto seg = std::make_unique<ShmSegment>();
    seg->name = store->get("shm/seg/" + std::to_string(r), timeout);
    int pfd = shm_open(seg->name.c_str(), O_RDWR, 0600);
    if (pfd < 0)
      CCLX_THROW(cclxSystemError, "shm_open(%s) of rank %d failed: %s (all ranks of a CPU comm must share one host)",
                 seg->name.c_str(), r, strerror(errno));
    struct stat st {};
    if (fstat(pfd, &st) != 0) {
      int e2 = errno;
      close(pfd);
      CCLX_THROW(cclxSystemError, "fstat(%s) failed: %s", seg->name.c_str(), strerror(e2));
    }
    if (size_t(st.st_size) != total) {
      close(pfd);
      CCLX_THROW(cclxInvalidUsage,
                 "host transport: rank %d's segment has %zu bytes, this rank expects %zu "
                 "(CCLX_SHM_CHUNK_BYTES must be the same on every rank)",
                 r, size_t(st.st_size), total);
    }
    void* q = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, pfd, 0);
    int e3 = errno;
    close(pfd);
    if (q == MAP_FAILED) CCLX_THROW(cclxSystemError, "mmap(%s) failed: %s", seg->name.c_str(), strerror(e3));
    seg->base = static_cast<char*>(q);
    seg->bytes = total;
    if (std::atomic_ref<uint64_t>(*seg->word(0)).load(std::memory_order_acquire) != kMagic)
      CCLX_THROW(cclxRemoteError, "host transport: segment %s of rank %d is not initialized", seg->name.c_str(), r);
    segs_[size_t(r)] = std::move(seg);
  }
  store->set("shm/mapped/" + std::to_string(rank), "1");
  waitKeys("shm/mapped/", "mapping the peers' segments");
  // Every peer holds a mapping now: remove the name so nothing outlives the processes.
  if (shm_unlink(ownName.c_str()) != 0)
    CCLX_WARN("shm_unlink(%s) failed: %s", ownName.c_str(), strerror(errno));
  segs_[size_t(rank)]->unlinked = true;
  CCLX_INFO("host transport ready: rank %d of %d, slot %zu B, channel %zu B, segment %zu B", rank, size,
            slotBytes_, p2pBytes_, total);
}

void HostCtx::beginColl(const char* name, std::chrono::milliseconds t) {
  if (broken_) CCLX_THROW(cclxInvalidUsage, "communicator is unusable: %s", brokenWhy_.c_str());
  coll_ = name;
  ++collSeq_;
  timeout = t;
  deadline_ = std::chrono::steady_clock::now() + t;
}

size_t HostCtx::slotBytes() const { return slotBytes_; }

char* HostCtx::slot(int peer, uint64_t s) const {
  return segs_[size_t(peer)]->base + slotsOffset(size) + (s & 1) * slotBytes_;
}

namespace {
char* channel(const ShmSegment& seg, int n, size_t slotBytes, size_t p2pBytes, int to, uint64_t msg) {
  return seg.base + slotsOffset(n) + 2 * slotBytes + (size_t(to) * 2 + (msg & 1)) * p2pBytes;
}
}  // namespace

char* HostCtx::lamportInbox(int owner, int parity, int src) const {
  const size_t off = inboxesOffset(size, slotBytes_, p2pBytes_);
  const int slot = src < owner ? src : src - 1;
  return segs_[size_t(owner)]->base + off + (size_t(parity & 1) * size_t(size - 1) + size_t(slot)) * lamportBytes_;
}

void HostCtx::failWaiting(int peer, bool aborted, const std::string& detail) {
  broken_ = true;
  if (aborted) {
    brokenWhy_ = peerFailure(peer);
    throw Error(peerFailureCode(peer), brokenWhy_);
  }
  brokenWhy_ = strFormat("host %s #%llu (rank %d of %d, %s) timed out after %lld ms; rank(s) [%s] did not arrive",
                         coll_, static_cast<unsigned long long>(collSeq_), rank, size, detail.c_str(),
                         static_cast<long long>(timeout.count()), std::to_string(peer).c_str());
  raiseFailed(peer);
  throw Error(cclxTimeout, brokenWhy_);
}

// The own segment's "aborted" word: 1 = abort(), 2 + r = timed out waiting for rank r. Peers that
// wait on this rank read it and fail at once with the cause (docs/design/failure.md).
void HostCtx::raiseFailed(int missing) {
  if (segs_.empty() || !segs_[size_t(rank)]) return;
  uint32_t expect = 0;
  std::atomic_ref<uint32_t>(*segs_[size_t(rank)]->abortedWord())
      .compare_exchange_strong(expect, 2u + uint32_t(missing), std::memory_order_seq_cst);
}

cclxResult_t HostCtx::peerFailureCode(int peer) const {
  const uint32_t v =
      std::atomic_ref<uint32_t>(*segs_[size_t(peer)]->abortedWord()).load(std::memory_order_acquire);
  return v >= 2 ? cclxTimeout : cclxRemoteError;
}

std::string HostCtx::peerFailure(int peer) const {
  const uint32_t v =
      std::atomic_ref<uint32_t>(*segs_[size_t(peer)]->abortedWord()).load(std::memory_order_acquire);
  if (v >= 2)
    return strFormat("host %s #%llu: rank %d timed out after %lld ms waiting for rank %u; the "
                     "communicator is unusable",
                     coll_, static_cast<unsigned long long>(collSeq_), peer,
                     static_cast<long long>(timeout.count()), v - 2);
  return strFormat("host %s #%llu: rank %d aborted", coll_, static_cast<unsigned long long>(collSeq_),
                   peer);
}

void HostCtx::pollCheck(int peer, uint32_t polls) {
  if (polls < uint32_t(cfg.spinIterations)) {
    cpuRelax();
    return;
  }
  sched_yield();
  if ((polls & 4095u) != 0) return;
  if (std::atomic_ref<uint32_t>(*segs_[size_t(peer)]->abortedWord()).load(std::memory_order_acquire) != 0)
    failWaiting(peer, true, "");
  if (std::chrono::steady_clock::now() >= deadline_) failWaiting(peer, false, "data");
}

void HostCtx::waitFor(const std::vector<int>& peers, int line, uint64_t target, const char* what) {
  for (int p : peers) {
    const ShmSegment& seg = *segs_[size_t(p)];
    if (loadAcq(seg, line) >= target) continue;
    waitOne(p, seg.word(line), target, what, [&] {
      std::string missing;
      for (int q : peers)
        if (loadAcq(*segs_[size_t(q)], line) < target)
          missing += (missing.empty() ? "" : ", ") + std::to_string(q);
      return missing;
    });
  }
}

void HostCtx::waitWord(int peer, uint64_t* word, uint64_t target, const char* what) {
  if (broken_) CCLX_THROW(cclxInvalidUsage, "communicator is unusable: %s", brokenWhy_.c_str());
  if (std::atomic_ref<uint64_t>(*word).load(std::memory_order_acquire) >= target) return;
  waitOne(peer, word, target, what, [&] { return std::to_string(peer); });
}

void HostCtx::addWord(uint64_t* word, uint64_t delta) {
  std::atomic_ref<uint64_t>(*word).fetch_add(delta, std::memory_order_seq_cst);
  uint32_t* waiters = reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(word) + 8);
  if (std::atomic_ref<uint32_t>(*waiters).load(std::memory_order_seq_cst) != 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

void HostCtx::checkPeer(int peer) {
  if (broken_) CCLX_THROW(cclxInvalidUsage, "communicator is unusable: %s", brokenWhy_.c_str());
  if (std::atomic_ref<uint32_t>(*segs_[size_t(peer)]->abortedWord()).load(std::memory_order_acquire) != 0) {
    broken_ = true;
    brokenWhy_ = peerFailure(peer);
    throw Error(peerFailureCode(peer), brokenWhy_);
  }
}

void HostCtx::checkPeers() {
  for (int p = 0; p < size; ++p)
    if (p != rank) checkPeer(p);
}

// Waits for *word >= target, `peer` being the rank that advances it: spins, yields, then sleeps
// on a futex on the word's low 32 bits in 2 ms slices (the waiter count sits 8 bytes after the
// word, see publish()). `missing` names the ranks still behind for the timeout message.
void HostCtx::waitOne(int p, uint64_t* wordPtr, uint64_t target, const char* what,
                      const std::function<std::string()>& missing) {
  std::atomic_ref<uint64_t> word(*wordPtr);
  std::atomic_ref<uint32_t> waiters(*reinterpret_cast<uint32_t*>(reinterpret_cast<char*>(wordPtr) + 8));
  const ShmSegment& seg = *segs_[size_t(p)];
  bool ok = false;
  for (int k = 0; k < cfg.spinIterations && !ok; ++k) {
    cpuRelax();
    ok = word.load(std::memory_order_acquire) >= target;
  }
  for (int k = 0; k < 16 && !ok; ++k) {
    sched_yield();
    ok = word.load(std::memory_order_acquire) >= target;
  }
  while (!ok) {
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline_) {
      broken_ = true;
      brokenWhy_ = strFormat("host %s #%llu (rank %d of %d, %s %llu) timed out after %lld ms; "
                             "rank(s) [%s] did not arrive",
                             coll_, static_cast<unsigned long long>(collSeq_), rank, size, what,
                             static_cast<unsigned long long>(target),
                             static_cast<long long>(timeout.count()), missing().c_str());
      raiseFailed(p);
      throw Error(cclxTimeout, brokenWhy_);
    }
    if (std::atomic_ref<uint32_t>(*seg.abortedWord()).load(std::memory_order_acquire) != 0) {
      broken_ = true;
      brokenWhy_ = peerFailure(p);
      throw Error(peerFailureCode(p), brokenWhy_);
    }
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline_ - now).count();
    long slice = left < 2000000 ? long(left) : 2000000L;  // 2 ms slices
    waiters.fetch_add(1, std::memory_order_seq_cst);
    uint64_t v = word.load(std::memory_order_seq_cst);
    if (v < target) {
      timespec ts{0, slice};
      long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(wordPtr), FUTEX_WAIT, uint32_t(v),
                        &ts, nullptr, 0);
      if (rc != 0 && errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR) {
        timespec nap{0, 50000};
        nanosleep(&nap, nullptr);  // futex unavailable: sleep briefly instead
      }
    }
    waiters.fetch_sub(1, std::memory_order_seq_cst);
    ok = word.load(std::memory_order_acquire) >= target;
  }
}

void HostCtx::sync(uint64_t s) {
  if (broken_) CCLX_THROW(cclxInvalidUsage, "communicator is unusable: %s", brokenWhy_.c_str());
  if (s != step_ + 1)
    CCLX_THROW(cclxInternalError, "host transport: step %llu published out of order (expected %llu)",
               static_cast<unsigned long long>(s), static_cast<unsigned long long>(step_ + 1));
  publish(*segs_[size_t(rank)], kStepLine, s);
  step_ = s;
  waitFor(others_, kStepLine, s, "step");
}

void HostCtx::sendTo(int peer, const void* buf, size_t bytes) {
  if (broken_) CCLX_THROW(cclxInvalidUsage, "communicator is unusable: %s", brokenWhy_.c_str());
  CCLX_ARG_CHECK(peer >= 0 && peer < size && peer != rank, "send: invalid peer %d (rank %d of %d)", peer, rank, size);
  const ShmSegment& own = *segs_[size_t(rank)];
  const char* src = static_cast<const char*>(buf);
  for (size_t off = 0; off < bytes; off += p2pBytes_) {
    size_t n = std::min(p2pBytes_, bytes - off);
    uint64_t msg = ++sent_[size_t(peer)];
    // Channel msg % 2 was last used by message msg - 2: the receiver must have consumed it.
    if (msg > 2) waitFor({peer}, ackedLine(size, rank), msg - 2, "send ack");
    std::memcpy(channel(own, size, slotBytes_, p2pBytes_, peer, msg), src + off, n);
    std::atomic_ref<uint64_t>(*own.msgLength(sentLine(peer), msg)).store(bytes, std::memory_order_relaxed);
    publish(own, sentLine(peer), msg);
  }
}

void HostCtx::recvFrom(int peer, void* buf, size_t bytes) {
  if (broken_) CCLX_THROW(cclxInvalidUsage, "communicator is unusable: %s", brokenWhy_.c_str());
  CCLX_ARG_CHECK(peer >= 0 && peer < size && peer != rank, "recv: invalid peer %d (rank %d of %d)", peer, rank, size);
  const ShmSegment& src = *segs_[size_t(peer)];
  char* dst = static_cast<char*>(buf);
  for (size_t off = 0; off < bytes; off += p2pBytes_) {
    size_t n = std::min(p2pBytes_, bytes - off);
    uint64_t msg = ++recvd_[size_t(peer)];
    waitFor({peer}, sentLine(rank), msg, "message");
    checkLength(peer, msg, bytes);
    std::memcpy(dst + off, channel(src, size, slotBytes_, p2pBytes_, rank, msg), n);
    publish(*segs_[size_t(rank)], ackedLine(size, peer), msg);
  }
}

// Called once piece `msg` from `peer` is visible (acquire load of its sent counter).
void HostCtx::checkLength(int peer, uint64_t msg, size_t bytes) {
  const uint64_t theirs = std::atomic_ref<uint64_t>(*segs_[size_t(peer)]->msgLength(sentLine(rank), msg))
                              .load(std::memory_order_relaxed);
  if (theirs == bytes) return;
  broken_ = true;
  brokenWhy_ = strFormat("host %s #%llu: rank %d sent a message of %llu bytes where rank %d expects %zu "
                         "bytes from it (sends and receives between two ranks must match in order and size)",
                         coll_, static_cast<unsigned long long>(collSeq_), peer,
                         static_cast<unsigned long long>(theirs), rank, bytes);
  throw Error(cclxInvalidUsage, brokenWhy_);
}

bool HostCtx::trySendPiece(int peer, const void* buf, size_t n, size_t msgBytes) {
  const ShmSegment& own = *segs_[size_t(rank)];
  const uint64_t msg = sent_[size_t(peer)] + 1;
  // Channel msg % 2 was last used by message msg - 2: the receiver must have consumed it.
  if (msg > 2 && loadAcq(*segs_[size_t(peer)], ackedLine(size, rank)) < msg - 2) return false;
  std::memcpy(channel(own, size, slotBytes_, p2pBytes_, peer, msg), buf, n);
  std::atomic_ref<uint64_t>(*own.msgLength(sentLine(peer), msg)).store(msgBytes, std::memory_order_relaxed);
  publish(own, sentLine(peer), msg);
  sent_[size_t(peer)] = msg;
  return true;
}

bool HostCtx::tryRecvPiece(int peer, void* buf, size_t n, size_t msgBytes) {
  const ShmSegment& src = *segs_[size_t(peer)];
  const uint64_t msg = recvd_[size_t(peer)] + 1;
  if (loadAcq(src, sentLine(rank)) < msg) return false;
  checkLength(peer, msg, msgBytes);
  std::memcpy(buf, channel(src, size, slotBytes_, p2pBytes_, rank, msg), n);
  publish(*segs_[size_t(rank)], ackedLine(size, peer), msg);
  recvd_[size_t(peer)] = msg;
  return true;
}

void HostCtx::idle(const std::vector<int>& pending, uint32_t rounds) {
  const uint32_t spin = uint32_t(std::max(cfg.spinIterations, 1));
  if (rounds < spin) {
    cpuRelax();
    return;
  }
  if (((rounds - spin) & 255u) == 0) {
    std::string missing;
    for (int p : pending) {
      if (std::atomic_ref<uint32_t>(*segs_[size_t(p)]->abortedWord()).load(std::memory_order_acquire) != 0)
        failWaiting(p, true, "");
      missing += (missing.empty() ? "" : ", ") + std::to_string(p);
    }
    if (std::chrono::steady_clock::now() >= deadline_) {
      broken_ = true;
      brokenWhy_ = strFormat("host %s #%llu (rank %d of %d, point to point) timed out after %lld ms; "
                             "rank(s) [%s] did not arrive",
                             coll_, static_cast<unsigned long long>(collSeq_), rank, size,
                             static_cast<long long>(timeout.count()), missing.c_str());
      raiseFailed(pending.front());
      throw Error(cclxTimeout, brokenWhy_);
    }
  }
  if (rounds - spin < 4096) {
    sched_yield();
  } else {  // a long wait: nap instead of taking the core from the ranks that have work
    timespec nap{0, 20000};
    nanosleep(&nap, nullptr);
  }
}

void HostCtx::abort() {
  if (!segs_.empty() && segs_[size_t(rank)]) {
    uint32_t expect = 0;
    std::atomic_ref<uint32_t>(*segs_[size_t(rank)]->abortedWord())
        .compare_exchange_strong(expect, 1u, std::memory_order_seq_cst);
  }
  broken_ = true;
  if (brokenWhy_.empty()) brokenWhy_ = "it was aborted";
  release();
}

void HostCtx::finalize() {
  broken_ = true;
  if (brokenWhy_.empty()) brokenWhy_ = "it was finalized";
  release();
}

}  // namespace cclx
