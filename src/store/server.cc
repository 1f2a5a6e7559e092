// TcpStore server: one thread poll()s the listening socket, every connection and a wake-up pipe,
// and serves each complete request from the table. A connection first passes the handshake
// (proto.h): until then it may send one frame of at most kMaxHandshakeFrame bytes, must finish
// within ServerLimits::handshakeTimeout, and at most ServerLimits::maxPending such connections
// are kept (a new one evicts the oldest once that one had ServerLimits::evictAfter to answer;
// until then new ones wait in the kernel's backlog). The destructor first lingers (bounded) while clients
// are still connected and using the store, so that the process that owns the store does not
// leave under a peer's request; then it wakes and joins the thread.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "store/auth.h"
#include "store/store_impl.h"
#include "store/proto.h"

namespace cclx::store {

bool isLoopback(uint32_t addr) { return (ntohl(addr) >> 24) == 127; }

namespace {

// The address to bind for `host`: a loopback address when `host` is or resolves only to one
// (a hostname the hosts file maps to 127.0.1.1 included), else every interface.
uint32_t bindAddress(const std::string& host, bool& loopback) {
  loopback = false;
  if (host == "localhost") {
    loopback = true;
    return htonl(INADDR_LOOPBACK);
  }
  in_addr a{};
  if (::inet_pton(AF_INET, host.c_str(), &a) == 1) {
    loopback = isLoopback(a.s_addr);
    return loopback ? a.s_addr : htonl(INADDR_ANY);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0 && res) {
    bool all = true;
    for (addrinfo* ai = res; ai; ai = ai->ai_next)
      all = all && isLoopback(reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_addr.s_addr);
    uint32_t first = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
    ::freeaddrinfo(res);
    if (all) {
      loopback = true;
      return first;
    }
  }
  return htonl(INADDR_ANY);
}

// ---------------------------------------------------------------------------------------------
// Server.

class ServerStore final : public PollingStore {
 public:
  ServerStore(const std::string& host, int port, const std::string& jobId,
              const std::string& token, const ServerLimits& limits)
      : jobId_(jobId), token_(token), host_(host), limits_(limits) {
    bool loopback = false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = bindAddress(host, loopback);
    if (!loopback && token_.empty())
      CCLX_THROW(cclxInvalidArgument,
                 "refusing to serve the store on %s:%d, which is not a loopback address, without "
                 "a token: set CCLX_STORE_TOKEN to the same secret on every rank (e.g. export "
                 "CCLX_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')), or "
                 "use MASTER_ADDR=127.0.0.1 for a job on one host",
                 host.c_str(), port);
    listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listenFd_ < 0) CCLX_THROW(cclxSystemError, "socket() failed: %s", std::strerror(errno));
    int one = 1;
    if (::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      int e = errno;
      ::close(listenFd_);
      CCLX_THROW(cclxSystemError, "setsockopt(SO_REUSEADDR) failed: %s", std::strerror(e));
    }
    if (::bind(listenFd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listenFd_, 1024) != 0) {
      int e = errno;
      ::close(listenFd_);
      CCLX_THROW(cclxSystemError, "cannot listen on %s:%d: %s", host.c_str(), port,
                 std::strerror(e));
    }
    socklen_t len = sizeof(a);
    if (::getsockname(listenFd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      int e = errno;
      ::close(listenFd_);
      CCLX_THROW(cclxSystemError, "getsockname() failed: %s", std::strerror(e));
    }
    port_ = ntohs(a.sin_port);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
      int e = errno;
      ::close(listenFd_);
      CCLX_THROW(cclxSystemError, "pipe2() failed: %s", std::strerror(e));
    }
    thread_ = std::thread([this] { serve(); });
    CCLX_INFO("store serving job '%s' on %s:%d (%s)", jobId_.c_str(), host.c_str(), port_,
              token_.empty() ? "loopback only, no token" : "token required");
  }

  ~ServerStore() override {
    linger();
    char c = 1;
    while (::write(wake_[1], &c, 1) < 0 && errno == EINTR) {
    }
    if (thread_.joinable()) thread_.join();
    for (auto& cl : clients_) ::close(cl.fd);
    ::close(listenFd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

  int port() const override { return port_; }
  std::string address() const override { return strFormat("%s:%d", host_.c_str(), port_); }
  bool serving() const override { return true; }
  int clients() const override { return nClients_.load(); }
  ServerStats serverStats() const override {
    ServerStats s;
    s.authenticated = nClients_.load();
    s.pending = nPending_.load();
    s.pendingBytes = pendingBytes_.load();
    s.refused = refused_.load();
    return s;
  }
  void set(const std::string& k, const std::string& v) override { table_.set(k, v); }
  int64_t add(const std::string& k, int64_t d) override { return table_.add(k, d); }
  bool check(const std::string& k) override { return table_.check(k); }
  void erase(const std::string& k) override { table_.erase(k); }

 protected:
  bool tryGet(const std::string& k, std::string& v) override { return table_.get(k, v); }
  std::vector<std::string> missing(const std::vector<std::string>& keys) override {
    return table_.missing(keys);
  }

 private:
  struct Client {
    int fd = -1;
    bool authed = false;
    Clock::time_point deadline;  // of the handshake
    uint64_t seq = 0;            // order of acceptance (the oldest pending one is evicted)
    Clock::time_point accepted;
    std::string nonce;           // the challenge's
    std::string in;
  };

  // A client that sent a request within kBusyWindow may be in the middle of a polling loop (a
  // get() or wait() polls every few ms): wait until every client left or went quiet, at most
  // kLingerMax.
  static constexpr auto kBusyWindow = std::chrono::milliseconds(250);
  static constexpr auto kLingerMax = std::chrono::seconds(5);
  void linger() {
    auto start = Clock::now();
    while (nClients_.load() > 0 && Clock::now() - start < kLingerMax &&
           Clock::now() - Clock::time_point(Clock::duration(lastRequest_.load())) < kBusyWindow)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  void serve() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      // At the cap of pending connections whose oldest is still young, new ones wait in the
      // kernel's backlog (the listening socket is left out of the poll) until it may be evicted.
      Clock::time_point next = Clock::time_point::max();
      const bool accepting = mayAccept(Clock::now(), next);
      fds.push_back({accepting ? listenFd_ : -1, POLLIN, 0});
      for (auto& c : clients_) {
        fds.push_back({c.fd, POLLIN, 0});
        if (!c.authed) next = std::min(next, c.deadline);
      }
      int wait = -1;
      if (next != Clock::time_point::max()) {
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
        wait = int(std::clamp<int64_t>(ms + 1, 0, 60000));
      }
      int r = ::poll(fds.data(), fds.size(), wait);
      if (r < 0) {
        if (errno == EINTR) continue;
        CCLX_WARN("store server poll() failed: %s; server stops", std::strerror(errno));
        return;
      }
      if (fds[0].revents) return;
      const auto now = Clock::now();
      for (size_t i = 0; i < clients_.size(); ++i) {
        Client& c = clients_[i];
        bool drop = false;
        if (fds[i + 2].revents) drop = !serviceClient(c);
        if (!drop && !c.authed && now >= c.deadline) drop = true;  // too slow, or idle
        if (drop) {
          if (!c.authed) ++refused_;
          ::close(c.fd);
          c.fd = -1;
        }
      }
      clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                    [](const Client& c) { return c.fd < 0; }),
                     clients_.end());
      if (accepting && (fds[1].revents & POLLIN)) acceptSome();
      updateCounts();
    }
  }

  // Whether a new connection may be accepted now: below the cap of pending connections, or at
  // it when the oldest pending one has had ServerLimits::evictAfter to answer (it is then
  // evicted for the new one). Otherwise `resume` becomes the time that changes.
  bool mayAccept(Clock::time_point now, Clock::time_point& resume) const {
    size_t pending = 0;
    const Client* oldest = nullptr;
    for (const auto& c : clients_) {
      if (c.authed) continue;
      ++pending;
      if (!oldest || c.seq < oldest->seq) oldest = &c;
    }
    if (pending < std::max<size_t>(1, limits_.maxPending)) return true;
    const auto at = oldest->accepted + limits_.evictAfter;
    if (now >= at) return true;
    resume = std::min(resume, at);
    return false;
  }

  void updateCounts() {
    int authed = 0, pending = 0;
    size_t bytes = 0;
    for (const auto& c : clients_) {
      if (c.authed) {
        ++authed;
      } else {
        ++pending;
        bytes += c.in.size();
      }
    }
    nClients_.store(authed);
    nPending_.store(pending);
    pendingBytes_.store(bytes);
  }

  // Accepts what the backlog holds (a bounded number per round, so that a flood of connections
  // does not starve the connections already open).
  void acceptSome() {
    for (int k = 0; k < 64; ++k) {
      Clock::time_point ignored = Clock::time_point::max();
      if (!mayAccept(Clock::now(), ignored)) return;
      sockaddr_in peer{};
      socklen_t plen = sizeof(peer);
      int fd = ::accept4(listenFd_, reinterpret_cast<sockaddr*>(&peer), &plen,
                         SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
          CCLX_WARN("store accept() failed: %s", std::strerror(errno));
        return;
      }
      if (token_.empty() && !(peer.sin_family == AF_INET && isLoopback(peer.sin_addr.s_addr))) {
        ::close(fd);  // without a token only loopback peers are served
        ++refused_;
        noteRefusal("a peer that is not on loopback (the store has no token)");
        continue;
      }
      setNoDelay(fd);
      evictIfFull();
      Client c;
      c.fd = fd;
      c.seq = nextSeq_++;
      c.accepted = Clock::now();
      c.deadline = c.accepted + limits_.handshakeTimeout;
      try {
        c.nonce = randomBytes(kNonceBytes);
        Writer w;
        w.u8(CHALLENGE).str(kMagic).u8(token_.empty() ? 0 : kFlagServerHasToken).str(c.nonce);
        sendFrame(fd, w.data(), Clock::now() + std::chrono::milliseconds(100), "client");
      } catch (const Error& e) {
        CCLX_INFO("store server: dropping a new connection: %s", e.what());
        ::close(fd);
        ++refused_;
        continue;
      }
      clients_.push_back(std::move(c));
    }
  }

  void evictIfFull() {
    size_t pending = 0;
    auto oldest = clients_.end();
    for (auto it = clients_.begin(); it != clients_.end(); ++it) {
      if (it->authed) continue;
      ++pending;
      if (oldest == clients_.end() || it->seq < oldest->seq) oldest = it;
    }
    if (pending < std::max<size_t>(1, limits_.maxPending)) return;
    ::close(oldest->fd);
    ++refused_;
    clients_.erase(oldest);
    noteRefusal("connections that had not authenticated (too many at once)");
  }

  // One WARN line per 10 s at most: a flood of connections must not flood the log.
  void noteRefusal(const char* what) {
    auto now = Clock::now();
    ++refusedSinceNote_;
    if (now < nextNote_) return;
    CCLX_WARN("store on %s:%d refused %llu connection(s) in the last 10 s; the latest: %s",
              host_.c_str(), port_, (unsigned long long)refusedSinceNote_, what);
    refusedSinceNote_ = 0;
    nextNote_ = now + std::chrono::seconds(10);
  }

  // Reads what is available and serves every complete request. False: drop the connection.
  bool serviceClient(Client& c) {
    if (!c.authed) return serviceHandshake(c);
    char buf[65536];
    for (;;) {
      ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) {
        c.in.append(buf, size_t(n));
        if (size_t(n) < sizeof(buf)) break;
      } else if (n == 0) {
        return false;
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else if (errno != EINTR) {
        return false;
      }
    }
    std::string req;
    for (Take t; (t = takeFrame(c.in, req)) != Take::kPartial;) {
      if (t == Take::kBad) return false;
      lastRequest_.store(Clock::now().time_since_epoch().count());
      std::string reply = table_.execute(req);
      try {
        sendFrame(c.fd, reply, Clock::now() + std::chrono::seconds(30), "client");
      } catch (const Error& e) {
        CCLX_WARN("store server: dropping a client: %s", e.what());
        return false;
      }
    }
    return true;
  }

  // Before authentication a connection may hold one frame of at most kMaxHandshakeFrame bytes:
  // a longer length closes it at once, before anything is allocated for it, and so does any
  // byte beyond that frame.
  bool serviceHandshake(Client& c) {
    char buf[4 + kMaxHandshakeFrame + 1];
    const size_t room = sizeof(buf) - c.in.size();
    ssize_t n;
    do {
      n = ::recv(c.fd, buf, room, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n == 0) return false;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    c.in.append(buf, size_t(n));
    if (c.in.size() < 4) return true;
    uint32_t len;
    std::memcpy(&len, c.in.data(), 4);
    if (len > kMaxHandshakeFrame) return false;
    if (c.in.size() > 4 + size_t(len)) return false;  // a request before the handshake's answer
    if (c.in.size() < 4 + size_t(len)) return true;
    std::string req = c.in.substr(4);
    c.in.clear();
    bool ok = false;
    std::string reply = authenticate(c, req, ok);
    try {
      sendFrame(c.fd, reply, Clock::now() + std::chrono::milliseconds(100), "client");
    } catch (const Error&) {
      return false;
    }
    if (!ok) return false;
    c.authed = true;
    c.nonce.clear();
    c.in.shrink_to_fit();
    return true;
  }

  // Verifies AUTH; `ok` when the client proved the token for this job. A refusal is the same
  // fixed text whatever went wrong; a client that holds the token but names another job learns
  // only that (OTHER_JOB), not which job this store serves.
  std::string authenticate(Client& c, const std::string& req, bool& ok) {
    ok = false;
    Reader r(req);
    uint8_t cmd = 0;
    std::string magic, job, clientNonce, mac;
    const std::string refused = Writer().u8(REFUSED).str(kRefusal).data();
    if (!r.u8(cmd) || cmd != AUTH || !r.str(magic) || magic != kMagic || !r.str(job) ||
        !r.str(clientNonce) || !r.str(mac) || !r.done() || clientNonce.size() != kNonceBytes ||
        mac.size() != 32) {
      noteRefusal("a malformed handshake");
      return refused;
    }
    const std::string want = authProof(true, token_, c.nonce, clientNonce, job);
    if (!constantTimeEqual(want.data(), mac.data(), want.size())) {
      noteRefusal("a client that did not prove the token");
      return refused;
    }
    if (job.size() != jobId_.size() ||
        !constantTimeEqual(job.data(), jobId_.data(), job.size())) {
      noteRefusal("a client of another job id");
      return Writer().u8(OTHER_JOB).str(kRefusal).data();
    }
    ok = true;
    return Writer().u8(OK).str(authProof(false, token_, c.nonce, clientNonce, job)).data();
  }

  std::string jobId_;
  std::string token_;
  std::string host_;
  ServerLimits limits_;
  std::atomic<int> nClients_{0};   // authenticated connections
  std::atomic<int> nPending_{0};   // connections in the handshake
  std::atomic<size_t> pendingBytes_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<Clock::rep> lastRequest_{0};  // steady-clock ticks of the last request served
  int listenFd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  uint64_t nextSeq_ = 0;
  uint64_t refusedSinceNote_ = 0;
  Clock::time_point nextNote_{};
  std::vector<Client> clients_;  // touched only by the server thread (and the destructor)
  KvTable table_;
  std::thread thread_;
};

}  // namespace

std::shared_ptr<TcpStore> makeServerStore(const std::string& host, int port,
                                          const std::string& jobId, const std::string& token,
                                          const ServerLimits& limits) {
  return std::make_shared<ServerStore>(host, port, jobId, token, limits);
}

}  // namespace cclx::store
