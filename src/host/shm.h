// Host shared-memory transport: one POSIX shm segment per rank, mapped by every peer.
//
// Segment layout (one per rank, written only by its owner except where noted):
//   line 0           magic, sizes, "aborted" word
//   line 1           step counter (collective steps this rank has published)
//   lines 2..N+1     sent[p]: messages this rank has published to peer p (point to point); the
//                    line also holds, per channel, the byte length of the message the piece in
//                    it belongs to (checked by the receiver)
//   lines N+2..2N+1  acked[p]: messages from peer p this rank has consumed
//   2 step slots     slotBytes() each; step s uses slot s % 2
//   N x 2 channels   p2pBytes each; messages to peer p, message n uses channel [p][n % 2]
//   2 x (N-1) inboxes lamportBytes() each, [parity][src]: written by rank src (the data-as-flag
//                    allreduce, host_lamport_allreduce.cc); 0xFF-filled ("empty") at setup
// Every counter sits alone on a 64-byte line, only increases (never reset), is stored with
// release and loaded with acquire.
//
// Collective step contract (what every host algorithm relies on):
//   A collective is a sequence of steps s = nextStep(), nextStep()+1, ... In step s each rank
//   (1) writes its own slot(rank, s), (2) calls sync(s) = publish s, then wait until every rank
//   has published s, (3) reads any peer's slot(p, s). Data of step s is read only between sync(s)
//   and the reader's sync(s + 1). Rank r writes slot(r, s + 2) (the same memory) only after its
//   own sync(s + 1) returned, i.e. after every peer published s + 1 and therefore finished reading
//   step s. So two slots suffice and no extra barrier is needed between back-to-back collectives.
//   All ranks must run the same number of steps per collective.
//
// Waiting spins cfg.spinIterations polls, then yields, then sleeps on a futex on the counter in
// short slices. Each wait ends at the deadline set by beginColl(); on expiry it throws
// cclxTimeout naming the collective, its sequence number and the ranks that did not arrive, and
// the context becomes unusable (as after abort()).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/backend.h"

namespace cclx {

/// Half-open element range [begin, end).
struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

/// Splits [0, count) into n contiguous ranges, the first count % n one element longer. Works for
/// every count, including count < n (trailing ranges are empty) and 0.
Range splitRange(size_t count, int n, int i);

struct ShmSegment;  // shm.cc

/// This rank's view of the host transport. Created once per CPU comm (collective: every rank of
/// the comm must construct it). Not thread-safe: one collective at a time per comm.
struct HostCtx {
  /// Creates this rank's segment, publishes it through info.store, maps every peer's segment and
  /// unlinks its own once every peer mapped it. Throws cclxUnsupported when the ranks span hosts,
  /// cclxSystemError when an OS call fails, cclxTimeout when a peer never shows up.
  explicit HostCtx(const BootstrapInfo& info);
  ~HostCtx();
  HostCtx(const HostCtx&) = delete;
  HostCtx& operator=(const HostCtx&) = delete;

  int rank = 0;
  int size = 1;
  Config cfg;
  std::chrono::milliseconds timeout{600000};  // of the collective in progress

  /// Starts a collective: sets the deadline (now + timeout) and the name used in errors. Throws
  /// cclxInvalidUsage when the context is unusable (earlier timeout, abort, finalize).
  void beginColl(const char* name, std::chrono::milliseconds timeout);

  // ---- collective steps -------------------------------------------------------------------
  /// Bytes in one step slot.
  size_t slotBytes() const;
  /// The step the next sync() will publish.
  uint64_t nextStep() const { return step_ + 1; }
  /// Slot of `peer` for step `s` (own slot: write before sync(s); peers': read after it).
  char* slot(int peer, uint64_t s) const;
  /// Publishes step s (must equal nextStep()) and waits until every rank published it.
  void sync(uint64_t s);
  /// One step with no data (a barrier).
  void barrier() { sync(nextStep()); }

  // ---- data-as-flag inboxes (peer-written) ----------------------------------------------------
  /// Bytes of one inbox (the largest message the data-as-flag allreduce carries).
  size_t lamportBytes() const { return lamportBytes_; }
  /// Inbox [parity][src] of rank `owner` (src != owner).
  char* lamportInbox(int owner, int parity, int src) const;
  /// Calls of the data-as-flag allreduce so far (its inbox parity); the algorithm advances it.
  uint64_t lamportCalls = 0;
  /// Spins until ready() is true, yielding after cfg.spinIterations polls; throws cclxTimeout
  /// (naming `peer`) at the collective's deadline or cclxRemoteError when `peer` aborted, and the
  /// context becomes unusable.
  template <class Ready>
  void pollUntil(int peer, Ready&& ready) {
    for (uint32_t k = 1; !ready(); ++k)
      if ((k & 255u) == 0) pollCheck(peer, k);
  }

  // ---- point to point ---------------------------------------------------------------------
  /// Copies `bytes` to `peer` through the pair's channel; returns once the last piece is
  /// published (the receiver may still be copying it out). Matched in order with recvFrom().
  void sendTo(int peer, const void* buf, size_t bytes);
  void recvFrom(int peer, void* buf, size_t bytes);
  /// Bytes of one channel piece (a message of more bytes travels as several pieces).
  size_t p2pBytes() const { return p2pBytes_; }
  /// Non-blocking halves of sendTo/recvFrom for grouped point to point: move the next piece (`n`
  /// bytes) of a message of `msgBytes` bytes when the pair's channel allows it now; false, with
  /// nothing done, when it does not. tryRecvPiece throws cclxInvalidUsage (and the context
  /// becomes unusable) when the sender's message has another length.
  bool trySendPiece(int peer, const void* buf, size_t n, size_t msgBytes);
  bool tryRecvPiece(int peer, void* buf, size_t n, size_t msgBytes);
  /// One idle round (number `rounds`, from 1) of a wait on the `pending` peers: spins, then yields,
  /// then naps. Throws cclxTimeout naming them at the deadline, cclxRemoteError when one aborted.
  void idle(const std::vector<int>& pending, uint32_t rounds);

  // ---- words of one-sided windows (host/window.cc) --------------------------------------------
  /// Waits until *word >= target (acquire), `peer` being the rank that advances it, with the
  /// schedule, deadline (beginColl) and peer-failure checks of the collective waits: throws
  /// cclxTimeout naming `peer` and `what`, or the peer's failure, and the context becomes
  /// unusable. `word` starts a 64-byte line of shared memory whose bytes 8..11 count its futex
  /// waiters.
  void waitWord(int peer, uint64_t* word, uint64_t target, const char* what);
  /// Adds `delta` to such a word and wakes its waiters.
  static void addWord(uint64_t* word, uint64_t delta);
  /// Throws what `peer`'s failure word says (it aborted or timed out), if anything; and
  /// cclxInvalidUsage when this context is unusable.
  void checkPeer(int peer);
  /// checkPeer() for every other rank: a collective's entry check. A comm one rank gave up on
  /// (a timeout, abort) fails every later call on every rank, also one whose data the peers had
  /// already staged before they gave up (docs/design/transport.md, "Timeouts and abort").
  void checkPeers();

  /// Marks this rank aborted (peers waiting on it fail fast with cclxRemoteError), unmaps.
  void abort();
  /// Unmaps every segment; later calls raise cclxInvalidUsage.
  void finalize();
  bool usable() const { return !broken_; }

 private:
  void waitFor(const std::vector<int>& peers, int line, uint64_t target, const char* what);
  void waitOne(int peer, uint64_t* word, uint64_t target, const char* what,
               const std::function<std::string()>& missing);
  void pollCheck(int peer, uint32_t polls);
  [[noreturn]] void failWaiting(int peer, bool aborted, const std::string& detail);
  /// Marks this rank's segment failed (timed out waiting for `missing`), once.
  void raiseFailed(int missing);
  /// What a peer's "aborted" word says, as the error a waiter raises.
  std::string peerFailure(int peer) const;
  cclxResult_t peerFailureCode(int peer) const;
  void checkLength(int peer, uint64_t msg, size_t bytes);
  void setup(const BootstrapInfo& info);
  void release();

  std::vector<std::unique_ptr<ShmSegment>> segs_;  // segs_[p]: rank p's segment as mapped here
  uint64_t step_ = 0;                               // last step this rank published
  std::vector<uint64_t> sent_, recvd_;              // per-peer message counters
  std::vector<int> others_;                         // every rank but this one
  size_t slotBytes_ = 0, p2pBytes_ = 0, lamportBytes_ = 0;
  bool broken_ = false;
  std::string brokenWhy_;
  const char* coll_ = "";
  uint64_t collSeq_ = 0;
  std::chrono::steady_clock::time_point deadline_{};
};

}  // namespace cclx
