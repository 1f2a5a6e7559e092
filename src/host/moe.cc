// The CPU twin of the MoE kernels (core/moe/engine.h; the kernels: gpu/moe): the same layout
// (core/moe/layout.h), the same protocol (credits, headers, slot records, flags written last with
// release ordering) and the same arithmetic (the FP8 block codec of core/elements/fp8_codec.h,
// f32 products and sums rounded once each, in the same order), on the calling thread over host
// shared memory that every rank maps. Its outputs are therefore bit for bit the kernels' for the
// same inputs, which is what the CPU tests of the protocol and the layout rely on.
//
// Memory: one POSIX shared-memory object per rank (the window of MoeBuffer::create maps the
// peers'), unlinked once every rank has mapped it (attach), so nothing outlives the processes.
//
// Failure model (docs/design/transport.md, "Timeouts and abort"): every wait polls through
// HostCtx::pollUntil, which throws cclxTimeout naming the rank at the call's deadline, or the
// peer's failure when it gave up; the call then poisons its outputs (all-ones bytes, NaN in every
// float type; the counts 0) and advances its call counter, and the error propagates.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "core/elements/fp8_codec.h"
#include "core/failure/watchdog.h"
#include "core/moe/engine.h"
#include "host/moe.h"
#include "host/shm.h"

namespace cclx {
namespace {

using moe::Layout;

uint64_t loadAcq(const char* p) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<char*>(p)))
      .load(std::memory_order_acquire);
}
void storeRel(char* p, uint64_t v) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).store(v, std::memory_order_release);
}
template <class V>
V rd(const char* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <class V>
void wr(char* p, V v) {
  std::memcpy(p, &v, sizeof(V));
}

class HostMoe final : public MoeEngine {
 public:
  HostMoe(std::shared_ptr<HostCtx> ctx, const Layout& lay)
      : ctx_(std::move(ctx)), lay_(lay), dtype_(DataType(lay.dtype)) {
    static std::atomic<uint64_t> seq{0};
    name_ = strFormat("/cclx-moe-%d-%llu", int(::getpid()), (unsigned long long)seq.fetch_add(1));
    int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) CCLX_THROW(cclxSystemError, "shm_open(%s): %s", name_.c_str(), strerror(errno));
    const bool sized = ftruncate(fd, off_t(lay.total)) == 0;
    const int e = errno;
    void* p = sized ? mmap(nullptr, lay.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
    const int e2 = errno;
    ::close(fd);
    if (p == MAP_FAILED) {
      shm_unlink(name_.c_str());
      CCLX_THROW(cclxSystemError, "cclx.moe.Buffer: %s of %zu bytes failed: %s",
                 sized ? "mmap" : "ftruncate", lay.total, strerror(sized ? e2 : e));
    }
    base_ = static_cast<char*>(p);  // a new object: zeroed
    peers_.assign(size_t(lay.N), nullptr);
    peers_[size_t(lay.rank)] = base_;
  }
  ~HostMoe() override { unlinkName(); }

  MoeRoute route() const override { return MoeRoute::Host; }
  void* base() const override { return base_; }
  void attach(char* const* peers) override {
    for (int r = 0; r < lay_.N; ++r) peers_[size_t(r)] = peers[r];
    unlinkName();  // every rank has mapped it
  }
  void release(bool healthy) override {
    unlinkName();
    if (healthy && base_) munmap(base_, lay_.total);
    else if (base_) CCLX_INFO("cclx.moe.Buffer: %zu bytes of host memory left mapped", lay_.total);
    base_ = nullptr;
  }

  // A split dispatch (MoePhase): the send counts the call (e + 1); its receive, a later call,
  // continues it with the same flag and leaves the counter as the send did.
  void dispatch(const MoeCall& c) override {
    const bool send = (c.phase & kMoeSend) != 0;
    ctx_->beginColl(send ? "moe_dispatch" : "moe_dispatch_recv", c.timeout);
    uint64_t* ctr = counter(0);
    const uint64_t flag = *ctr + (send ? 1 : 0);
    try {
      ctx_->checkPeers();  // a peer gave up on the comm: this call fails too
      if (send) runSend(c, flag);
      if (c.phase & kMoeRecv) runRecv(flag);
    } catch (const Error& err) {
      *ctr = flag;
      if (fatalCode(err.code())) poisonDispatch();
      throw;
    }
    *ctr = flag;
  }

  void combine(const MoeCall& c) override {
    ctx_->beginColl("moe_combine", c.timeout);
    uint64_t* ctr = counter(1);
    const uint64_t e = *ctr;
    try {
      ctx_->checkPeers();
      runCombine(c, e);
    } catch (const Error& err) {
      *ctr = e + 1;
      if (fatalCode(err.code()) && c.out)
        std::memset(c.out, 0xFF, size_t(c.tokens) * size_t(lay_.H) * size_t(lay_.esize));
      throw;
    }
    *ctr = e + 1;
  }

 private:
  uint64_t* counter(int kind) const {
    return reinterpret_cast<uint64_t*>(base_ + lay_.counters) + size_t(kind) * moe::kGridCap;
  }
  template <class V>
  V* local(size_t off) const {
    return reinterpret_cast<V*>(base_ + off);
  }
  void unlinkName() {
    if (!name_.empty()) shm_unlink(name_.c_str());
    name_.clear();
  }
  /// Waits (acquire) until the flag at `p` (written by `peer`) reaches v.
  void waitFlag(int peer, const char* p, uint64_t v) {
    ctx_->pollUntil(peer, [&] { return loadAcq(p) >= v; });
  }

  void poisonDispatch() {
    std::memset(base_ + lay_.xrows, 0xFF, lay_.slots() * lay_.xRow);
    if (lay_.fp8) std::memset(base_ + lay_.scales, 0xFF, lay_.slots() * size_t(lay_.nb) * 4);
    std::memset(base_ + lay_.recvCounts, 0, size_t(lay_.N) * 4);
    std::memset(base_ + lay_.expertCounts, 0, size_t(lay_.L) * 4);
    std::memset(base_ + lay_.expertOffsets, 0, size_t(lay_.L + 1) * 4);
  }

  void runSend(const MoeCall& c, uint64_t flag);  // steps 1 to 4
  void runRecv(uint64_t flag);                     // step 5
  void runCombine(const MoeCall& c, uint64_t e);
  void writeRow(const char* xrow, char* slotBase, size_t slot) const;

  std::shared_ptr<HostCtx> ctx_;
  Layout lay_;
  DataType dtype_;
  std::string name_;
  char* base_ = nullptr;
  std::vector<char*> peers_;
};

float loadElem(const char* row, int i, DataType t) {
  switch (t) {
    case DataType::f32: return rd<float>(row + 4 * size_t(i));
    case DataType::bf16: return math::bf16ToF32(rd<uint16_t>(row + 2 * size_t(i)));
    default: return math::f16ToF32(rd<uint16_t>(row + 2 * size_t(i)));
  }
}
void storeElem(char* row, int i, DataType t, float v) {
  switch (t) {
    case DataType::f32: wr<float>(row + 4 * size_t(i), v); break;
    case DataType::bf16: wr<uint16_t>(row + 2 * size_t(i), math::f32ToBf16(v)); break;
    default: wr<uint16_t>(row + 2 * size_t(i), math::f32ToF16(v)); break;
  }
}

// Row of token data into slot `slot` of the rank whose memory starts at slotBase: the dtype's
// bytes then zeros up to the row's 16-byte padding, or FP8 codes (blocks of 128 from the row's
// start, the last one partial; codes past H are 0) and the block metas.
void HostMoe::writeRow(const char* xrow, char* slotBase, size_t slot) const {
  char* dst = slotBase + lay_.xrowAt(slot);
  const size_t H = size_t(lay_.H);
  if (!lay_.fp8) {
    std::memcpy(dst, xrow, H * size_t(lay_.esize));
    std::memset(dst + H * size_t(lay_.esize), 0, lay_.xRow - H * size_t(lay_.esize));
    return;
  }
  float v[moe::kScaleBlock];
  uint8_t codes[moe::kScaleBlock];
  char* sc = slotBase + lay_.scaleAt(slot);
  for (int b = 0; b < lay_.nb; ++b) {
    const size_t lo = size_t(b) * moe::kScaleBlock;
    const int n = int(std::min<size_t>(moe::kScaleBlock, H - lo));
    for (int i = 0; i < n; ++i) v[i] = loadElem(xrow, int(lo) + i, dtype_);
    const fp8::Meta m = fp8::quantizeBlock(v, n, moe::kScaleBlock, codes);
    std::memcpy(dst + lo, codes, std::min<size_t>(moe::kScaleBlock, lay_.xRow - lo));
    wr<uint32_t>(sc + 4 * size_t(b), m);
  }
}

void HostMoe::runSend(const MoeCall& c, uint64_t flag) {
  const Layout& l = lay_;
  const int N = l.N, me = l.rank, k = l.k, L = l.L, T = c.tokens;
  // 1. Credits: this rank's slots for every source are free for call e.
  for (int s = 0; s < N; ++s) storeRel(peers_[size_t(s)] + l.creditAt(0, me), flag);
  // 2. The routing (normalized ids, positions), kept for combine and cached mode.
  int32_t* ids = local<int32_t>(l.tokIds);
  float* w = local<float>(l.tokW);
  if (!c.cached)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        const size_t i = size_t(t) * k + j;
        const int64_t id = c.ids64 ? static_cast<const int64_t*>(c.ids)[i]
                                   : static_cast<const int32_t*>(c.ids)[i];
        ids[i] = moe::normId(id, l.E);
        w[i] = c.w[i];
      }
  std::vector<int> nDest(static_cast<size_t>(N), 0), nExp(static_cast<size_t>(l.E), 0);
  std::vector<int> posDest(static_cast<size_t>(T) * N, -1), pos(static_cast<size_t>(T) * k, -1);
  int32_t* tokRows = local<int32_t>(l.tokRows);
  for (int t = 0; t < T; ++t) {
    const int32_t* ti = ids + size_t(t) * k;
    for (int j = 0; j < k; ++j) {
      if (moe::firstOfRank(ti, j, L)) posDest[size_t(t) * N + ti[j] / L] = nDest[size_t(ti[j] / L)]++;
      if (moe::firstOfExpert(ti, j)) pos[size_t(t) * k + j] = nExp[size_t(ti[j])]++;
    }
    for (int j = 0; j < k; ++j)
      tokRows[size_t(t) * k + j] = ti[j] < 0 ? -2
                                   : moe::firstOfRank(ti, j, L)
                                       ? (ti[j] / L) * l.B + posDest[size_t(t) * N + ti[j] / L]
                                       : -1;
  }
  // 3. Wait for every rank's credit, then the headers.
  for (int d = 0; d < N; ++d) waitFlag(d, base_ + l.creditAt(0, d), flag);
  for (int d = 0; d < N; ++d) {
    char* h = peers_[size_t(d)] + l.headAt(me);
    wr<int32_t>(h + 8, nDest[size_t(d)]);
    wr<int32_t>(h + 12, 0);
    for (int x = 0; x < L; ++x) wr<int32_t>(h + 16 + 4 * size_t(x), nExp[size_t(d * L + x)]);
    storeRel(h, flag);
  }
  // 4. Every (token, destination) pair once: the row, then the flags of its later pieces (the
  // kernel writes the pieces apart), then the slot record, its flag last.
  const size_t rowBytes = size_t(l.H) * size_t(l.esize);
  for (int t = 0; t < T; ++t) {
    const int32_t* ti = ids + size_t(t) * k;
    for (int d = 0; d < N; ++d) {
      const int p = posDest[size_t(t) * N + d];
      if (p < 0) continue;
      char* pb = peers_[size_t(d)];
      const size_t slot = size_t(me) * l.B + size_t(p);
      writeRow(static_cast<const char*>(c.x) + size_t(t) * rowBytes, pb, slot);
      for (int q = 1; q < l.xParts; ++q) storeRel(pb + l.xflagAt(slot, q), flag);
      char* rec = pb + l.metaAt(slot);
      wr<int32_t>(rec + 8, t);
      wr<int32_t>(rec + 12, 0);
      for (int j = 0; j < k; ++j) {
        wr<int32_t>(rec + l.recId(j), ti[j]);
        wr<float>(rec + l.recW(j), w[size_t(t) * k + j]);
        wr<int32_t>(rec + l.recPos(j), pos[size_t(t) * k + j]);
      }
      storeRel(rec, flag);
    }
  }
}

void HostMoe::runRecv(uint64_t flag) {
  const Layout& l = lay_;
  const int N = l.N, me = l.rank, k = l.k, L = l.L;
  // 5. Receive: every source's header, then its slots; the entries of the local experts.
  std::vector<int> cnt(static_cast<size_t>(N)), ecnt(static_cast<size_t>(N) * L);
  for (int s = 0; s < N; ++s) {
    const char* h = base_ + l.headAt(s);
    waitFlag(s, h, flag);
    cnt[size_t(s)] = rd<int32_t>(h + 8);
    for (int x = 0; x < L; ++x) ecnt[size_t(s) * L + x] = rd<int32_t>(h + 16 + 4 * size_t(x));
  }
  // base[x][s]: the first entry of local expert x from source s (expert-major, then source).
  std::vector<int> base(static_cast<size_t>(L) * N);
  int32_t* ec = local<int32_t>(l.expertCounts);
  int32_t* eo = local<int32_t>(l.expertOffsets);
  int at = 0;
  for (int x = 0; x < L; ++x) {
    eo[x] = at;
    for (int s = 0; s < N; ++s) {
      base[size_t(x) * N + s] = at;
      at += ecnt[size_t(s) * L + x];
    }
    ec[x] = at - eo[x];
  }
  eo[L] = at;
  int32_t* rc = local<int32_t>(l.recvCounts);
  int32_t* rows = local<int32_t>(l.entryRows);
  int32_t* se = local<int32_t>(l.slotEntries);
  float* sw = local<float>(l.slotW);
  for (int s = 0; s < N; ++s) {
    rc[s] = cnt[size_t(s)];
    for (int p = 0; p < cnt[size_t(s)]; ++p) {
      const size_t slot = size_t(s) * l.B + size_t(p);
      const char* rec = base_ + l.metaAt(slot);
      waitFlag(s, rec, flag);
      for (int q = 1; q < l.xParts; ++q) waitFlag(s, base_ + l.xflagAt(slot, q), flag);
      int32_t ri[moe::kMaxTopK];
      float rw[moe::kMaxTopK];
      for (int j = 0; j < k; ++j) {
        ri[j] = rd<int32_t>(rec + l.recId(j));
        rw[j] = rd<float>(rec + l.recW(j));
      }
      int n = 0;
      for (int j = 0; j < k; ++j) {
        if (!moe::firstOfExpert(ri, j) || ri[j] / L != me) continue;
        const int entry = base[size_t(ri[j] - me * L) * N + s] + rd<int32_t>(rec + l.recPos(j));
        rows[entry] = int32_t(slot);
        se[slot * l.kk + n] = entry;
        sw[slot * l.kk + n] = moe::expertWeight(ri, rw, j, k);
        ++n;
      }
      for (; n < l.kk; ++n) {
        se[slot * l.kk + n] = -1;
        sw[slot * l.kk + n] = 0.f;
      }
    }
  }
}

// Rounds (core/moe/layout.h, combine ring): round r holds the owners' tokens [r*W, (r+1)*W). In
// step r this rank sends back round r's received slots (each source's slots are in its token
// order, so a round is a run of them), then consumes its own tokens of round r - 1 and grants
// every expert rank the credit for it. A round's rows go out once their owner has consumed the
// round D before, whose ring rows they reuse (one round, D = 1, when the ring holds the batch).
void HostMoe::runCombine(const MoeCall& c, uint64_t e) {
  const Layout& l = lay_;
  const int N = l.N, me = l.rank, k = l.k, H = l.H, T = c.tokens, W = l.ringW, D = l.ringD;
  const uint64_t flag = e + 1;
  for (int s = 0; s < N; ++s) storeRel(peers_[size_t(s)] + l.creditAt(1, me), flag);
  for (int d = 0; d < N; ++d) waitFlag(d, base_ + l.creditAt(1, d), flag);
  const int32_t* rc = local<int32_t>(l.recvCounts);
  const int32_t* se = local<int32_t>(l.slotEntries);
  const float* sw = local<float>(l.slotW);
  const int32_t* tr = local<int32_t>(l.tokRows);
  const size_t rowBytes = size_t(H) * size_t(l.esize);
  std::vector<float> acc(static_cast<size_t>(H));
  // the owner's token index of received slot p of source s (-1 when out of range: not sent)
  auto tokenOf = [&](int s, int p) {
    const int t = rd<int32_t>(base_ + l.metaAt(size_t(s) * l.B + size_t(p)) + 8);
    return t >= 0 && t < l.B ? t : -1;
  };
  int R = (T + W - 1) / W;
  for (int s = 0; s < N; ++s)
    if (rc[s] > 0) R = std::max(R, l.roundOf(std::max(tokenOf(s, rc[s] - 1), 0)) + 1);
  // Expert side of one received slot: sum_j w_j * expert_out[entry_j] in f32 (top-k order; each
  // product and sum rounded once), rounded once to the dtype, into the owner's ring row.
  auto sendBack = [&](int s, int p, int t) {
    const size_t slot = size_t(s) * l.B + size_t(p);
    char* dst = peers_[size_t(s)] + l.yrowAt(l.ySlot(me, t));
    bool nan = false, first = true;
    for (int x = 0; x < l.kk; ++x) {
      const int entry = se[slot * l.kk + x];
      if (entry < 0) break;
      if (size_t(entry) >= c.eoutRows) {
        nan = true;
        break;
      }
      const char* row = static_cast<const char*>(c.eout) + size_t(entry) * rowBytes;
      const float wt = sw[slot * l.kk + x];
      for (int i = 0; i < H; ++i) {
        const float v = fp8::mulRn(wt, loadElem(row, i, dtype_));
        acc[size_t(i)] = first ? v : fp8::addRn(acc[size_t(i)], v);
      }
      first = false;
    }
    if (nan) {
      std::memset(dst, 0xFF, rowBytes);
    } else {
      if (first) std::fill(acc.begin(), acc.end(), 0.f);
      for (int i = 0; i < H; ++i) storeElem(dst, i, dtype_, acc[size_t(i)]);
    }
    std::memset(dst + rowBytes, 0, l.yRow - rowBytes);
    for (int q = 0; q < l.yParts; ++q)  // every piece's flag (the kernel writes them apart)
      storeRel(peers_[size_t(s)] + l.yflagAt(l.ySlot(me, t), q),
               moe::roundFlag(flag, l.roundOf(t)));
  };
  // Owner side of token t: its ranks' rows in top-k order (first slot of each rank), f32 sums.
  auto gather = [&](int t) {
    char* dst = static_cast<char*>(c.out) + size_t(t) * rowBytes;
    bool nan = false, first = true;
    for (int j = 0; j < k; ++j) nan = nan || tr[size_t(t) * k + j] == -2;
    for (int j = 0; j < k && !nan; ++j) {
      const int r = tr[size_t(t) * k + j];
      if (r < 0) continue;
      const size_t y = l.ySlot(r / l.B, t);
      for (int q = 0; q < l.yParts; ++q)
        waitFlag(r / l.B, base_ + l.yflagAt(y, q), moe::roundFlag(flag, l.roundOf(t)));
      const char* row = base_ + l.yrowAt(y);
      for (int i = 0; i < H; ++i) {
        const float v = loadElem(row, i, dtype_);
        acc[size_t(i)] = first ? v : fp8::addRn(acc[size_t(i)], v);
      }
      first = false;
    }
    if (nan) {
      std::memset(dst, 0xFF, rowBytes);
      return;
    }
    if (first) std::fill(acc.begin(), acc.end(), 0.f);
    for (int i = 0; i < H; ++i) storeElem(dst, i, dtype_, acc[size_t(i)]);
  };
  std::vector<int> next(static_cast<size_t>(N), 0);  // each source's next slot to send back
  for (int r = 0; r <= R; ++r) {
    for (int s = 0; s < N && r < R; ++s) {
      int p = next[size_t(s)];
      for (bool waited = r < D; p < rc[s]; ++p) {
        const int t = tokenOf(s, p);
        if (l.roundOf(std::max(t, 0)) > r) break;
        if (!waited)  // the ring rows of round r - D at owner s are free
          waitFlag(s, base_ + l.ringCreditAt(s, r - D), moe::roundFlag(flag, r - D));
        waited = true;
        if (t >= 0) sendBack(s, p, t);
      }
      next[size_t(s)] = p;
    }
    if (r == 0) continue;
    for (int t = (r - 1) * W; t < std::min(T, r * W); ++t) gather(t);
    if (D > 1)
      for (int d = 0; d < N; ++d)
        storeRel(peers_[size_t(d)] + l.ringCreditAt(me, r - 1), moe::roundFlag(flag, r - 1));
  }
}

}  // namespace

std::unique_ptr<MoeEngine> makeHostMoe(std::shared_ptr<HostCtx> ctx, const moe::Layout& lay) {
  return std::make_unique<HostMoe>(std::move(ctx), lay);
}

}  // namespace cclx
