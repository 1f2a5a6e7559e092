// TcpStore client: one connection (guarded by a mutex), made with retries until the timeout, and
// closed for good if a request fails mid-frame.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "store/store_impl.h"
#include "store/proto.h"

namespace cclx::store {

namespace {
// ---------------------------------------------------------------------------------------------
// Client.

class ClientStore final : public PollingStore {
 public:
  ClientStore(const std::string& host, int port, const std::string& jobId,
              std::chrono::milliseconds timeout)
      : port_(port), timeout_(timeout) {
    peer_ = strFormat("%s:%d", host.c_str(), port);
    connectWithRetry(host, port, Clock::now() + timeout);
    std::string reply =
        call(store::Writer().u8(store::HELLO).str(store::kMagic).str(jobId).data());
    store::Reader r(reply);
    uint8_t st = 0;
    r.u8(st);
    if (st == store::REFUSED) {
      std::string theirs;
      r.str(theirs);
      ::close(fd_);
      CCLX_THROW(cclxRemoteError, "store at %s belongs to job %s, not %s", peer_.c_str(),
                 theirs.c_str(), jobId.c_str());
    }
    if (st != store::OK) {
      ::close(fd_);
      CCLX_THROW(cclxRemoteError, "store at %s rejected the handshake", peer_.c_str());
    }
  }
  ~ClientStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  int port() const override { return port_; }
  std::string address() const override { return peer_; }
  void set(const std::string& k, const std::string& v) override {
    expectOk(call(store::Writer().u8(store::SET).str(k).str(v).data()), "set");
  }
  int64_t add(const std::string& k, int64_t d) override {
    std::string rep = call(store::Writer().u8(store::ADD).str(k).i64(d).data());
    store::Reader r(rep);
    uint8_t st;
    int64_t v;
    if (!r.u8(st) || st != store::OK || !r.i64(v))
      CCLX_THROW(cclxRemoteError, "store %s: bad reply to add", peer_.c_str());
    return v;
  }
  bool check(const std::string& k) override {
    std::string rep = call(store::Writer().u8(store::CHECK).str(k).data());
    return !rep.empty() && uint8_t(rep[0]) == store::OK;
  }
  void erase(const std::string& k) override {
    expectOk(call(store::Writer().u8(store::ERASE).str(k).data()), "erase");
  }

 protected:
  bool tryGet(const std::string& k, std::string& v) override {
    std::string rep = call(store::Writer().u8(store::GET).str(k).data());
    store::Reader r(rep);
    uint8_t st;
    if (!r.u8(st)) CCLX_THROW(cclxRemoteError, "store %s: empty reply", peer_.c_str());
    if (st == store::NOT_FOUND) return false;
    if (st != store::OK || !r.str(v))
      CCLX_THROW(cclxRemoteError, "store %s: bad reply to get", peer_.c_str());
    return true;
  }
  std::vector<std::string> missing(const std::vector<std::string>& keys) override {
    store::Writer w;
    w.u8(store::MISSING).u32(uint32_t(keys.size()));
    for (const auto& k : keys) w.str(k);
    std::string rep = call(w.data());
    store::Reader r(rep);
    uint8_t st;
    uint32_t n;
    if (!r.u8(st) || st != store::OK || !r.u32(n))
      CCLX_THROW(cclxRemoteError, "store %s: bad reply to wait", peer_.c_str());
    std::vector<std::string> out(n);
    for (auto& s : out)
      if (!r.str(s)) CCLX_THROW(cclxRemoteError, "store %s: bad reply to wait", peer_.c_str());
    return out;
  }

 private:
  void expectOk(const std::string& rep, const char* what) {
    if (rep.empty() || uint8_t(rep[0]) != store::OK)
      CCLX_THROW(cclxRemoteError, "store %s: %s failed", peer_.c_str(), what);
  }

  std::string call(const std::string& req) {
    std::lock_guard<std::mutex> lk(mu_);
    if (fd_ < 0) CCLX_THROW(cclxRemoteError, "store %s: connection is closed", peer_.c_str());
    auto deadline = Clock::now() + timeout_;
    try {
      store::sendFrame(fd_, req, deadline, peer_.c_str());
      return store::recvFrame(fd_, deadline, peer_.c_str());
    } catch (...) {
      ::close(fd_);  // the stream may be mid-frame: never reuse it
      fd_ = -1;
      throw;
    }
  }

  // Non-blocking connect bounded by the deadline (an unreachable host must not stall for the
  // kernel's SYN timeout). True when connected; otherwise `err` says why.
  static bool connectBefore(int fd, const addrinfo* ai, Clock::time_point deadline,
                            std::string& err) {
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return true;
    if (errno != EINPROGRESS && errno != EINTR) {
      err = std::strerror(errno);
      return false;
    }
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd, POLLOUT, 0};
      int r = ::poll(&p, 1, int(std::max<int64_t>(1, std::min<int64_t>(left.count(), 1000))));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        err = strFormat("poll() failed: %s", std::strerror(errno));
        return false;
      }
      if (r == 0) {
        if (Clock::now() >= deadline) {
          err = "connect timed out";
          return false;
        }
        continue;
      }
      int soErr = 0;
      socklen_t len = sizeof(soErr);
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &len) != 0) soErr = errno;
      if (soErr == 0) return true;
      err = std::strerror(soErr);
      return false;
    }
  }

  // Retries until the deadline (the server may start later than its clients), logging every
  // kWaitReportEvery that it still waits. The server is the rendezvous' rank 0 (or the process
  // that made the unique id), so the messages name it.
  void connectWithRetry(const std::string& host, int port, Clock::time_point deadline) {
    auto backoff = std::chrono::milliseconds(10);
    std::string lastErr;
    const auto start = Clock::now();
    auto nextReport = start + kWaitReportEvery;
    for (;;) {
      addrinfo hints{};
      hints.ai_family = AF_INET;
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      int g = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      if (g != 0) {
        lastErr = strFormat("cannot resolve host '%s': %s", host.c_str(), gai_strerror(g));
      } else {
        for (addrinfo* ai = res; ai; ai = ai->ai_next) {
          int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
          if (fd < 0) {
            lastErr = strFormat("socket() failed: %s", std::strerror(errno));
            continue;
          }
          int fl = ::fcntl(fd, F_GETFL);
          if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
            lastErr = strFormat("fcntl() failed: %s", std::strerror(errno));
            ::close(fd);
            continue;
          }
          if (connectBefore(fd, ai, deadline, lastErr)) {
            setNoDelay(fd);
            ::freeaddrinfo(res);
            fd_ = fd;
            return;
          }
          ::close(fd);
        }
        ::freeaddrinfo(res);
      }
      auto now = Clock::now();
      if (now >= deadline)
        CCLX_THROW(cclxTimeout,
                   "could not connect to the store at %s within %lld ms: rank 0, which serves it, "
                   "has not started or cannot be reached (%s)",
                   peer_.c_str(), (long long)timeout_.count(), lastErr.c_str());
      if (now >= nextReport) {
        CCLX_WARN("waiting for rank 0 (the store's server) at %s, %lld s of %lld s: %s",
                  peer_.c_str(),
                  (long long)std::chrono::duration_cast<std::chrono::seconds>(now - start).count(),
                  (long long)std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(),
                  lastErr.c_str());
        nextReport += kWaitReportEvery;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      std::this_thread::sleep_for(std::min(backoff, left));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
  }

  std::string peer_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  int fd_ = -1;
};

}  // namespace

std::shared_ptr<TcpStore> makeClientStore(const std::string& host, int port,
                                          const std::string& jobId,
                                          std::chrono::milliseconds timeout) {
  return std::make_shared<ClientStore>(host, port, jobId, timeout);
}

}  // namespace cclx::store
