// Point to point: the pair's channel in the sender's segment (see host/shm.h). Sends and
// receives between a pair match in call order; other ranks are not involved.
//
// Grouped calls (SendRecv: batches, and scatter / gather / all-gather-v / all-to-all lists,
// which Comm lowers onto it) keep one queue of messages per peer and direction, in listing
// order, and move pieces on every queue whose channel is ready, never blocking on one pair: a
// sender fills a pair's two channel slots and goes on with other pairs while the receiver drains
// them. Every rank therefore keeps making progress on every pair whatever order the ranks list
// their messages in, and no message size can deadlock the group. Messages to the rank itself are
// copied locally (memmove; a receive into its own send buffer is skipped).
#include <algorithm>
#include <cstring>
#include <deque>
#include <vector>

#include "host/algos/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

struct Pending {
  char* data;     // send: read from; receive: written to
  size_t bytes;   // whole message
  size_t done;    // bytes moved so far
};

void runGroup(const CollArgs& a, HostCtx& ctx) {
  const size_t es = dtypeSize(a.dtype), piece = ctx.p2pBytes(), n = size_t(ctx.size);
  std::vector<std::deque<Pending>> out(n), in(n);
  std::vector<const P2PSend*> selfSends;
  std::vector<const P2PRecv*> selfRecvs;
  for (const P2PSend& m : a.sends) {
    if (m.peer == ctx.rank) selfSends.push_back(&m);
    else if (m.count) out[size_t(m.peer)].push_back({static_cast<char*>(const_cast<void*>(m.buf)), m.count * es, 0});
  }
  for (const P2PRecv& m : a.recvs) {
    if (m.peer == ctx.rank) selfRecvs.push_back(&m);
    else if (m.count) in[size_t(m.peer)].push_back({static_cast<char*>(m.buf), m.count * es, 0});
  }
  // Comm checked that self messages pair up with equal counts and that no receive buffer
  // overlaps a send buffer, so local copies may go first.
  for (size_t k = 0; k < selfSends.size() && k < selfRecvs.size(); ++k)
    if (selfRecvs[k]->buf != selfSends[k]->buf && selfRecvs[k]->count)
      std::memmove(selfRecvs[k]->buf, selfSends[k]->buf, selfRecvs[k]->count * es);

  std::vector<int> waiting;
  for (uint32_t idle = 0;;) {
    bool progress = false;
    waiting.clear();
    for (size_t p = 0; p < n; ++p) {
      // Moves the pieces of q's messages that `move` (a try of the transport) takes now.
      auto drain = [&](std::deque<Pending>& q, auto move) {
        for (; !q.empty(); q.pop_front()) {
          Pending& m = q.front();
          for (size_t len; m.done < m.bytes; m.done += len) {
            len = std::min(piece, m.bytes - m.done);
            if (!move(m.data + m.done, len, m.bytes)) return;
            progress = true;
          }
        }
      };
      drain(out[p], [&](char* d, size_t len, size_t total) {
        return ctx.trySendPiece(int(p), d, len, total);
      });
      drain(in[p], [&](char* d, size_t len, size_t total) {
        return ctx.tryRecvPiece(int(p), d, len, total);
      });
      if (!out[p].empty() || !in[p].empty()) waiting.push_back(int(p));
    }
    if (waiting.empty()) return;
    if (progress) {
      idle = 0;
    } else {
      ctx.idle(waiting, ++idle);
    }
  }
}

class HostSendRecv final : public HostAlgo {
 public:
  void run(const CollArgs& a, HostCtx& ctx) override {
    if (a.type == CollType::SendRecv)
      runGroup(a, ctx);
    else if (a.type == CollType::Send)
      ctx.sendTo(a.root, a.send ? a.send : a.recv, a.bytes());
    else
      ctx.recvFrom(a.root, a.recv ? a.recv : const_cast<void*>(a.send), a.bytes());
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostSendRecv() { return std::make_unique<HostSendRecv>(); }
}  // namespace cclx
