// MoeBuffer (include/cclx/moe.hpp): validates every call, allocates through the backend's engine,
// maps every peer's memory through a one-sided window over it (the window's registration does
// the handle exchange and its teardown agreement), and turns an engine's failure into the
// comm's (core/failure/watchdog.h). docs/design/moe.md.
#include <cclx/moe.hpp>

#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "core/comm/comm_internal.h"
#include "core/failure/watchdog.h"
#include "core/moe/engine.h"
#include "core/moe/layout.h"

namespace cclx {

namespace moe {
Layout checkedLayout(const MoeConfig& c, int size, int rank);  // route.cc
}

struct MoeBuffer::State {
  std::shared_ptr<Comm> comm;
  CommState* cs = nullptr;
  MoeConfig cfg;
  moe::Layout lay;
  MoeOutputs out;
  std::unique_ptr<MoeEngine> engine;
  std::shared_ptr<Window> win;  // null at world size 1
  size_t lastT = 0;
  bool dispatched = false;
  bool recvPending = false;  // a dispatch sent with recvLater awaits dispatchRecv()
  bool destroyed = false;
};

namespace {

template <class F>
void guardedCall(CommState& cs, const char* op, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    if (fatalCode(e.code())) commFailed(cs, e.code(), e.what(), op);
    throw;
  }
}

std::chrono::milliseconds resolvedTimeout(const CommState& cs, const MoeOptions& o) {
  CCLX_ARG_CHECK(o.timeout.count() >= 0, "timeout must not be negative (got %lld ms)",
                 (long long)o.timeout.count());
  return o.timeout.count() ? o.timeout : cs.info.opts.timeout;
}

void requireNoPendingRecv(const MoeBuffer::State& s, const char* op) {
  CCLX_REQUIRE(!s.recvPending, cclxInvalidUsage,
               "%s: the last dispatch was sent with recv_later and not received yet (call its "
               "receive first: dispatchRecv / the hook)", op);
}

MoeOutputs outputsOf(const moe::Layout& l) {
  MoeOutputs o;
  o.recvX = l.xrows;
  o.recvXRowBytes = l.xRow;
  o.recvScales = l.fp8 ? l.scales : 0;
  o.recvCounts = l.recvCounts;
  o.expertCounts = l.expertCounts;
  o.expertOffsets = l.expertOffsets;
  o.entryRows = l.entryRows;
  o.entryCap = l.entries();
  o.slotEntries = l.slotEntries;
  o.slotWeights = l.slotW;
  o.tokRows = l.tokRows;
  return o;
}

}  // namespace

std::shared_ptr<MoeBuffer> MoeBuffer::create(const std::shared_ptr<Comm>& comm,
                                             const MoeConfig& cfg) {
  CCLX_ARG_CHECK(comm != nullptr, "cclx.moe.Buffer: the communicator is null");
  std::string why;
  const MoeRoute r = route(*comm, cfg, &why);
  if (r == MoeRoute::Composed)
    CCLX_THROW(cclxUnsupported, "cclx.moe.Buffer: no kernels for this communicator: %s",
               why.c_str());
  auto st = std::make_unique<State>();
  st->comm = comm;
  st->cs = &CommAccess::state(*comm);
  st->cfg = cfg;
  st->lay = moe::checkedLayout(cfg, st->cs->info.size, st->cs->info.rank);
  st->out = outputsOf(st->lay);
  CommState& cs = *st->cs;
  guardedCall(cs, "moe buffer", [&] { st->engine = cs.backend->newMoe(st->lay, cfg); });
  const int n = cs.info.size, me = cs.info.rank;
  std::vector<char*> peers(size_t(n), nullptr);
  peers[size_t(me)] = static_cast<char*>(st->engine->base());
  if (n > 1) {
    try {
      st->win = comm->newWindow();
      st->win->registerBuffer(st->engine->base(), st->lay.total, DataType::u8);
      for (int p = 0; p < n; ++p) peers[size_t(p)] = static_cast<char*>(st->win->remotePtr(p));
    } catch (...) {
      // A peer may have mapped the memory before the registration failed somewhere.
      if (st->win && st->win->registered()) {
        try {
          st->win->deregisterBuffer();
        } catch (const std::exception& e) {
          CCLX_WARN("cclx.moe.Buffer: %s", e.what());
        }
      }
      st->engine->release(false);
      throw;
    }
  }
  st->engine->attach(peers.data());
  CCLX_INFO("cclx.moe.Buffer on comm '%s': %s engine, %zu bytes per rank", comm->name().c_str(),
            moeRouteName(st->engine->route()), st->lay.total);
  return std::make_shared<MoeBuffer>(std::move(st));
}

MoeBuffer::MoeBuffer(std::unique_ptr<State> st) : st_(std::move(st)) {}

MoeBuffer::~MoeBuffer() {
  if (!st_ || st_->destroyed || !st_->engine) return;
  try {
    st_->win.reset();  // local release of the peers' mappings (theirs of ours stay)
    st_->engine->release(false);
  } catch (const std::exception& e) {
    CCLX_WARN("cclx.moe.Buffer teardown: %s", e.what());
  }
}

void MoeBuffer::destroy() {
  State& s = *st_;
  if (s.destroyed) return;
  s.destroyed = true;
  const bool healthy = !s.cs->aborted && !s.cs->finalized;
  bool released = healthy;
  if (s.win && s.win->registered()) {
    try {
      s.win->deregisterBuffer();  // every rank done, peers unmapped
    } catch (...) {
      released = false;
      s.engine->release(false);
      s.engine.reset();
      throw;
    }
  }
  s.win.reset();
  s.engine->release(released);
  s.engine.reset();
}

void MoeBuffer::dispatch(const void* x, const void* topkIds, DataType idsType,
                         const float* topkWeights, size_t numTokens, const MoeOptions& o) {
  State& s = *st_;
  const char* op = "cclx.moe.Buffer.dispatch";
  requireUsable(*s.cs, op);
  CCLX_REQUIRE(!s.destroyed, cclxInvalidUsage, "%s: the buffer was destroyed", op);
  CCLX_ARG_CHECK(numTokens <= s.cfg.maxTokensPerRank,
                 "%s: %zu tokens exceed max_tokens_per_rank=%zu", op, numTokens,
                 s.cfg.maxTokensPerRank);
  CCLX_ARG_CHECK(idsType == DataType::i32 || idsType == DataType::i64,
                 "%s: topk_ids must be int32 or int64, not %s", op, dtypeName(idsType));
  CCLX_ARG_CHECK(numTokens == 0 || (x && topkIds && topkWeights),
                 "%s: a null tokens / topk_ids / topk_weights buffer", op);
  requireNoPendingRecv(s, op);
  MoeCall c;
  c.x = x;
  c.ids = topkIds;
  c.ids64 = idsType == DataType::i64;
  c.w = topkWeights;
  c.tokens = int(numTokens);
  c.phase = o.recvLater ? kMoeSend : kMoeBoth;
  c.stream = o.stream;
  c.timeout = resolvedTimeout(*s.cs, o);
  guardedCall(*s.cs, op, [&] { s.engine->dispatch(c); });
  s.lastT = numTokens;
  s.dispatched = true;
  s.recvPending = o.recvLater;
}

void MoeBuffer::dispatchCached(const void* x, const MoeOptions& o) {
  State& s = *st_;
  const char* op = "cclx.moe.Buffer.dispatch (cached)";
  requireUsable(*s.cs, op);
  CCLX_REQUIRE(!s.destroyed, cclxInvalidUsage, "%s: the buffer was destroyed", op);
  CCLX_REQUIRE(s.dispatched, cclxInvalidUsage, "%s: no dispatch to take the routing of", op);
  CCLX_ARG_CHECK(s.lastT == 0 || x, "%s: the tokens buffer is null", op);
  requireNoPendingRecv(s, op);
  MoeCall c;
  c.x = x;
  c.cached = true;
  c.tokens = int(s.lastT);
  c.phase = o.recvLater ? kMoeSend : kMoeBoth;
  c.stream = o.stream;
  c.timeout = resolvedTimeout(*s.cs, o);
  guardedCall(*s.cs, op, [&] { s.engine->dispatch(c); });
  s.recvPending = o.recvLater;
}

void MoeBuffer::dispatchRecv(const MoeOptions& o) {
  State& s = *st_;
  const char* op = "cclx.moe.Buffer.dispatch (receive)";
  requireUsable(*s.cs, op);
  CCLX_REQUIRE(!s.destroyed, cclxInvalidUsage, "%s: the buffer was destroyed", op);
  CCLX_REQUIRE(s.recvPending, cclxInvalidUsage,
               "%s: no dispatch sent with recv_later awaits its receive", op);
  CCLX_ARG_CHECK(!o.recvLater, "%s: recv_later applies to a dispatch's send, not its receive", op);
  MoeCall c;
  c.cached = true;  // the routing of the send, kept in the buffer
  c.tokens = int(s.lastT);
  c.phase = kMoeRecv;
  c.stream = o.stream;
  c.timeout = resolvedTimeout(*s.cs, o);
  s.recvPending = false;  // a failed receive fails the comm: nothing is left to receive
  guardedCall(*s.cs, op, [&] { s.engine->dispatch(c); });
}

bool MoeBuffer::recvPending() const { return st_->recvPending; }

void MoeBuffer::combine(const void* expertOut, size_t expertRows, void* out,
                        const MoeOptions& o) {
  State& s = *st_;
  const char* op = "cclx.moe.Buffer.combine";
  requireUsable(*s.cs, op);
  CCLX_REQUIRE(!s.destroyed, cclxInvalidUsage, "%s: the buffer was destroyed", op);
  CCLX_REQUIRE(s.dispatched, cclxInvalidUsage, "%s: no dispatch to combine", op);
  requireNoPendingRecv(s, op);
  CCLX_ARG_CHECK(expertRows == 0 || expertOut, "%s: expert_out is null", op);
  CCLX_ARG_CHECK(s.lastT == 0 || out, "%s: the output is null", op);
  MoeCall c;
  c.eout = expertOut;
  c.eoutRows = expertRows;
  c.out = out;
  c.tokens = int(s.lastT);
  c.stream = o.stream;
  c.timeout = resolvedTimeout(*s.cs, o);
  guardedCall(*s.cs, op, [&] { s.engine->combine(c); });
}

MoeRoute MoeBuffer::engineRoute() const { return st_->engine ? st_->engine->route() : MoeRoute::Composed; }
const MoeConfig& MoeBuffer::config() const { return st_->cfg; }
const MoeOutputs& MoeBuffer::outputs() const { return st_->out; }
void* MoeBuffer::data() const { return st_->engine ? st_->engine->base() : nullptr; }
size_t MoeBuffer::bytes() const { return st_->lay.total; }
size_t MoeBuffer::lastTokens() const { return st_->lastT; }
int MoeBuffer::blocks() const { return st_->engine ? st_->engine->blocks() : 0; }
int MoeBuffer::chunkTokens() const { return st_->engine ? st_->engine->chunkTokens() : 0; }
int MoeBuffer::ringRows() const { return st_->lay.ringRows; }
int MoeBuffer::ringRound() const { return st_->lay.ringW; }
const std::shared_ptr<Comm>& MoeBuffer::comm() const { return st_->comm; }

}  // namespace cclx
