// TcpStore client: one connection (guarded by a mutex), made with retries until the timeout,
// authenticated by the handshake of proto.h (a refusal ends the retries at once with a message
// naming the setting that differs), and closed for good if a request fails mid-frame.
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
#include "store/auth.h"
#include "store/store_impl.h"
#include "store/proto.h"

namespace cclx::store {

namespace {
// ---------------------------------------------------------------------------------------------
// Client.

class ClientStore final : public PollingStore {
 public:
  ClientStore(const std::string& host, int port, const std::string& jobId,
              const std::string& token, std::chrono::milliseconds timeout)
      : port_(port), timeout_(timeout) {
    peer_ = strFormat("%s:%d", host.c_str(), port);
    connectWithRetry(host, port, jobId, token, Clock::now() + timeout);
  }
  ~ClientStore() override {
    if (fd_ >= 0) ::close(fd_);
  }

  int port() const override { return port_; }
  std::string address() const override { return peer_; }
  void set(const std::string& k, const std::string& v) override {
    expectOk(call(Writer().u8(SET).str(k).str(v).data()), "set");
  }
  int64_t add(const std::string& k, int64_t d) override {
    std::string rep = call(Writer().u8(ADD).str(k).i64(d).data());
    Reader r(rep);
    uint8_t st = 0xff;
    int64_t v;
    if (!r.u8(st)) CCLX_THROW(cclxRemoteError, "store %s: empty reply to add", peer_.c_str());
    if (st == BAD_REQUEST)
      CCLX_THROW(cclxInvalidArgument,
                 "store %s: adding %lld to key '%s' overflows a 64-bit integer; the value is "
                 "unchanged", peer_.c_str(), (long long)d, k.c_str());
    if (st != OK || !r.i64(v))
      CCLX_THROW(cclxRemoteError, "store %s: bad reply to add", peer_.c_str());
    return v;
  }
  bool check(const std::string& k) override {
    std::string rep = call(Writer().u8(CHECK).str(k).data());
    return !rep.empty() && uint8_t(rep[0]) == OK;
  }
  void erase(const std::string& k) override {
    expectOk(call(Writer().u8(ERASE).str(k).data()), "erase");
  }

 protected:
  bool tryGet(const std::string& k, std::string& v) override {
    std::string rep = call(Writer().u8(GET).str(k).data());
    Reader r(rep);
    uint8_t st;
    if (!r.u8(st)) CCLX_THROW(cclxRemoteError, "store %s: empty reply", peer_.c_str());
    if (st == NOT_FOUND) return false;
    if (st != OK || !r.str(v))
      CCLX_THROW(cclxRemoteError, "store %s: bad reply to get", peer_.c_str());
    return true;
  }
  std::vector<std::string> missing(const std::vector<std::string>& keys) override {
    Writer w;
    w.u8(MISSING).u32(uint32_t(keys.size()));
    for (const auto& k : keys) w.str(k);
    std::string rep = call(w.data());
    Reader r(rep);
    uint8_t st;
    uint32_t n;
    if (!r.u8(st) || st != OK || !r.u32(n))
      CCLX_THROW(cclxRemoteError, "store %s: bad reply to wait", peer_.c_str());
    std::vector<std::string> out(n);
    for (auto& s : out)
      if (!r.str(s)) CCLX_THROW(cclxRemoteError, "store %s: bad reply to wait", peer_.c_str());
    return out;
  }

 private:
  void expectOk(const std::string& rep, const char* what) {
    if (rep.empty() || uint8_t(rep[0]) != OK)
      CCLX_THROW(cclxRemoteError, "store %s: %s failed", peer_.c_str(), what);
  }

  std::string call(const std::string& req) {
    std::lock_guard<std::mutex> lk(mu_);
    if (fd_ < 0) CCLX_THROW(cclxRemoteError, "store %s: connection is closed", peer_.c_str());
    auto deadline = Clock::now() + timeout_;
    try {
      sendFrame(fd_, req, deadline, peer_.c_str());
      return recvFrame(fd_, deadline, peer_.c_str());
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

  // The handshake on a fresh connection. True when authenticated; false (with `err`) when the
  // server closed the connection first (it was busy: try again); throws when it refused.
  bool handshake(int fd, const std::string& jobId, const std::string& token,
                 Clock::time_point deadline, std::string& err) {
    std::string challenge;
    try {
      challenge = recvFrame(fd, deadline, peer_.c_str(), kMaxHandshakeFrame);
    } catch (const Error& e) {
      if (e.code() == cclxTimeout) throw;
      err = e.what();
      return false;
    }
    Reader r(challenge);
    uint8_t cmd = 0, flags = 0;
    std::string magic, serverNonce;
    if (!r.u8(cmd) || cmd != CHALLENGE || !r.str(magic) || magic != kMagic || !r.u8(flags) ||
        !r.str(serverNonce) || serverNonce.size() != kNonceBytes)
      CCLX_THROW(cclxRemoteError,
                 "the server at %s is not a cclx store of this version (its first message is "
                 "not the handshake's)", peer_.c_str());
    const bool serverHasToken = flags & kFlagServerHasToken;
    if (serverHasToken && token.empty())
      CCLX_THROW(cclxRemoteError,
                 "the store at %s requires a token and this process has none: set "
                 "CCLX_STORE_TOKEN to the same secret on every rank", peer_.c_str());
    if (!serverHasToken && !token.empty())
      CCLX_THROW(cclxRemoteError,
                 "the store at %s has no token but this process has one (CCLX_STORE_TOKEN): set "
                 "the same CCLX_STORE_TOKEN on every rank", peer_.c_str());
    const std::string clientNonce = randomBytes(kNonceBytes);
    std::string reply;
    try {
      sendFrame(fd,
                Writer()
                    .u8(AUTH)
                    .str(kMagic)
                    .str(jobId)
                    .str(clientNonce)
                    .str(authProof(true, token, serverNonce, clientNonce, jobId))
                    .data(),
                deadline, peer_.c_str());
      reply = recvFrame(fd, deadline, peer_.c_str(), kMaxHandshakeFrame);
    } catch (const Error& e) {
      if (e.code() == cclxTimeout) throw;
      err = e.what();
      return false;
    }
    Reader rr(reply);
    uint8_t st = 0;
    rr.u8(st);
    if (st == OK) {
      std::string proof;
      const std::string want = authProof(false, token, serverNonce, clientNonce, jobId);
      if (!rr.str(proof) || proof.size() != want.size() ||
          !constantTimeEqual(proof.data(), want.data(), want.size()))
        CCLX_THROW(cclxRemoteError,
                   "the store at %s could not prove that it holds this job's token: it is not "
                   "this job's store", peer_.c_str());
      return true;
    }
    if (st == OTHER_JOB)
      CCLX_THROW(cclxRemoteError,
                 "the store at %s serves another job: this process's job id is '%s' (CCLX_JOB_ID, "
                 "else TORCHELASTIC_RUN_ID): set it alike on every rank", peer_.c_str(),
                 jobId.c_str());
    if (!token.empty())
      CCLX_THROW(cclxRemoteError,
                 "the store at %s refused this process's token: CCLX_STORE_TOKEN differs from "
                 "the one of the rank that serves it (rank 0): set the same secret on every rank",
                 peer_.c_str());
    CCLX_THROW(cclxRemoteError, "the store at %s refused the handshake", peer_.c_str());
  }

  // Retries until the deadline (the server may start later than its clients, or close a
  // connection it had no room for), logging every kWaitReportEvery that it still waits. The
  // server is the rendezvous' rank 0 (or the process that made the unique id), so the messages
  // name it. Without a token only a loopback address is tried.
  void connectWithRetry(const std::string& host, int port, const std::string& jobId,
                        const std::string& token, Clock::time_point deadline) {
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
          if (token.empty() &&
              !isLoopback(reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr.s_addr)) {
            ::freeaddrinfo(res);
            CCLX_THROW(cclxInvalidArgument,
                       "the store at %s is not on a loopback address and this process has no "
                       "token: set CCLX_STORE_TOKEN to the same secret on every rank (e.g. "
                       "export CCLX_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d "
                       "' \\n'))", peer_.c_str());
          }
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
          bool done = false;
          if (connectBefore(fd, ai, deadline, lastErr)) {
            setNoDelay(fd);
            try {
              done = handshake(fd, jobId, token, deadline, lastErr);
            } catch (const Error& e) {
              ::close(fd);
              ::freeaddrinfo(res);
              if (e.code() != cclxTimeout) throw;
              CCLX_THROW(cclxTimeout,
                         "the store at %s did not complete the handshake within %lld ms: rank 0, "
                         "which serves it, is busy or it is not a cclx store", peer_.c_str(),
                         (long long)timeout_.count());
            }
          }
          if (done) {
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
                                          const std::string& jobId, const std::string& token,
                                          std::chrono::milliseconds timeout) {
  return std::make_shared<ClientStore>(host, port, jobId, token, timeout);
}

}  // namespace cclx::store
