// Comm::dump(): a comm's state for hang debugging (NCCLX's comm_dump), and the bookkeeping it
// reads, which dispatch() (comm_colls.cc) and the failure paths (core/failure/watchdog.cc) keep.
// Cost per operation: one uncontended lock, a counter, and, for a Work that is not already
// complete (CUDA comms), one queue entry; completions are found by polling the oldest entries
// (Work::isCompleted, non-blocking) when the queue is long and when dump() runs.
#include <algorithm>
#include <cctype>
#include <cstdio>

#include <cclx/cclx.h>

#include "base/error.h"
#include "core/comm/comm_internal.h"
#include "core/failure/watchdog.h"

namespace cclx {

namespace {

constexpr size_t kPollAbove = 64;    // pending entries before dispatch polls the oldest
constexpr size_t kSweepAbove = 4096; // pending entries before dispatch polls every entry
constexpr size_t kListed = 16;       // in_flight_ops lists the oldest ones

// One entry's state: true once it completed (counted) or failed (counted); false while running.
bool settled(OpTrack& t, OpTrack::Pending& p) {
  try {
    if (p.work != nullptr && !p.work->isCompleted()) return false;
    ++t.completed;
  } catch (...) {  // the operation failed: isCompleted() raises its error
    ++t.failed;
  }
  return true;
}

// Moves the oldest pending entries that have completed (or failed) out of the queue; stops at
// the first one still running. Caller holds t.mu.
void pollPending(OpTrack& t, size_t keep) {
  while (t.pending.size() > keep) {
    OpTrack::Pending& p = t.pending.front();
    if (!settled(t, p)) return;
    t.lastCompleted = p.label + " #" + std::to_string(p.seq);
    t.pending.pop_front();
  }
}

// Every pending entry that settled leaves the queue, wherever it is (operations on several
// streams complete out of order, so one old operation still running must not hold back the
// count of the later ones). Run when the queue reaches t.sweepAt, which then doubles from what
// stays: amortized O(1) polls per operation, and every operation stays tracked until it settles.
void sweepPending(OpTrack& t) {
  std::deque<OpTrack::Pending> keep;
  for (OpTrack::Pending& p : t.pending) {
    if (!settled(t, p)) keep.push_back(std::move(p));
    else t.lastCompleted = p.label + " #" + std::to_string(p.seq);
  }
  t.pending.swap(keep);
  t.sweepAt = std::max(kSweepAbove, 2 * t.pending.size());
}

// "1,3" from the first "rank(s) 1, 3" / "rank(s) [1,3]" of a failure message (the form every
// cclx message naming missing or failed peers uses), else from "waiting for rank N" or
// "rank N aborted"; "" when it names none.
std::string namedRanks(const std::string& msg) {
  auto digitsAfter = [&](size_t i) {
    std::string out;
    while (i < msg.size()) {
      const char c = msg[i];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        out += c;
      } else if (c == ',' && !out.empty() && out.back() != ',') {
        out += ',';
      } else if (c != ' ' && c != '[' && c != ']') {
        break;
      } else if (c == ']') {
        break;
      }
      ++i;
    }
    while (!out.empty() && out.back() == ',') out.pop_back();
    return out;
  };
  size_t p = msg.find("rank(s) ");
  if (p != std::string::npos) return digitsAfter(p + 8);
  p = msg.find("waiting for rank ");
  if (p != std::string::npos) return digitsAfter(p + 17);
  for (p = msg.find("rank "); p != std::string::npos; p = msg.find("rank ", p + 5)) {
    std::string r = digitsAfter(p + 5);
    const size_t after = p + 5 + r.size();
    if (!r.empty() && msg.compare(after, 8, " aborted") == 0) return r;
  }
  return "";
}

}  // namespace

void trackIssued(CommState& st, const char* label, uint64_t seq) {
  std::lock_guard<std::mutex> g(st.track.mu);
  ++st.track.issued;
  st.track.lastOp = std::string(label) + " #" + std::to_string(seq);
}

void trackReturned(CommState& st, const char* label, uint64_t seq, std::shared_ptr<Work> w,
                   const char* algo) {
  OpTrack& t = st.track;
  std::lock_guard<std::mutex> g(t.mu);
  if (algo) t.algo[label] = algo;
  if (w == nullptr || w == completedWork()) {  // finished inside the call (CPU comms)
    ++t.completed;
    t.lastCompleted = std::string(label) + " #" + std::to_string(seq);
    return;
  }
  if (t.pending.size() >= kPollAbove) pollPending(t, 0);
  t.pending.push_back({seq, label, std::move(w)});
  if (t.pending.size() >= std::max(t.sweepAt, kSweepAbove)) sweepPending(t);
}

void trackThrew(CommState& st) {
  std::lock_guard<std::mutex> g(st.track.mu);
  ++st.track.failed;
}

void noteFailure(CommState& st, cclxResult_t code, const std::string& msg, const std::string& op) {
  if (!fatalCode(code)) return;
  std::lock_guard<std::mutex> g(st.track.mu);
  if (st.track.failCode != cclxSuccess) return;
  st.track.failCode = code;
  st.track.failMsg = msg;
  st.track.failOp = op;
}

std::map<std::string, std::string> Comm::dump() const {
  CommState& st = *st_;
  std::map<std::string, std::string> d;
  d["name"] = st.info.opts.name;
  d["rank"] = std::to_string(st.info.rank);
  d["size"] = std::to_string(st.info.size);
  d["local_rank"] = std::to_string(st.info.localRank);
  d["hosts"] = std::to_string(st.info.numHosts);
  d["backend"] = st.info.opts.backend;
  d["transport"] = st.backend ? st.backend->name() : "none";
  d["device"] = st.info.device.type == DeviceSpec::CUDA
                    ? "cuda:" + std::to_string(st.info.device.index)
                    : "cpu";
  d["timeout_ms"] = std::to_string(st.info.opts.timeout.count());
  d["aborted"] = st.aborted ? "true" : "false";
  d["finalized"] = st.finalized ? "true" : "false";
  OpTrack& t = st.track;
  std::lock_guard<std::mutex> g(t.mu);
  // A finalized or aborted comm's works are not polled (their backend is torn down): what was
  // pending then stays listed as it was.
  if (!st.finalized && !st.aborted) sweepPending(t);
  d["ops_issued"] = std::to_string(t.issued);
  d["ops_completed"] = std::to_string(t.completed);
  d["ops_failed"] = std::to_string(t.failed);
  d["in_flight"] = std::to_string(t.issued - t.completed - t.failed);
  std::string list;
  for (size_t i = 0; i < t.pending.size() && i < kListed; ++i)
    list += (i ? "," : "") + t.pending[i].label + " #" + std::to_string(t.pending[i].seq);
  d["in_flight_ops"] = list;
  d["last_op"] = t.lastOp.empty() ? "none" : t.lastOp;
  d["last_completed_op"] = t.lastCompleted.empty() ? "none" : t.lastCompleted;
  if (t.failCode == cclxSuccess) {
    d["failure"] = "none";
    d["failure_ranks"] = "";
  } else {
    d["failure"] = std::string(cclxGetErrorString(t.failCode)) +
                   (t.failOp.empty() ? "" : " during " + t.failOp) + ": " + t.failMsg;
    d["failure_ranks"] = namedRanks(t.failMsg);
  }
  for (const auto& [coll, algo] : t.algo) d["algo." + coll] = algo;
  return d;
}

}  // namespace cclx
