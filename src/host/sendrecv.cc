// Point to point: the pair's channel in the sender's segment (see host/shm.h). Sends and
// receives between a pair match in call order; other ranks are not involved.
#include "host/algos.h"
#include "host/shm.h"

namespace cclx {
namespace {

class HostSendRecv final : public HostAlgo {
 public:
  const char* name() const override { return "shm-p2p"; }
  bool canRun(const CollArgs& a, const HostCtx&) const override {
    return a.type == CollType::Send || a.type == CollType::Recv;
  }
  void run(const CollArgs& a, HostCtx& ctx) override {
    if (a.type == CollType::Send)
      ctx.sendTo(a.root, a.send ? a.send : a.recv, a.bytes());
    else
      ctx.recvFrom(a.root, a.recv ? a.recv : const_cast<void*>(a.send), a.bytes());
  }
};

}  // namespace
std::unique_ptr<HostAlgo> makeHostSendRecv() { return std::make_unique<HostSendRecv>(); }
}  // namespace cclx
