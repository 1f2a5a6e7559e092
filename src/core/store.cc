// TcpStore: rank 0 serves the table from a background thread (poll() over all connections);
// every other rank is a client with one connection. Blocking operations (get, wait) poll the
// table with a growing back-off, so a request never occupies the server.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "core/store_proto.h"

namespace cclx {

using store::Clock;

namespace {

std::string joinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 16; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > 16) s += strFormat(", ... (%zu in all)", keys.size());
  return s;
}

// get() and wait() on top of non-blocking primitives.
class PollingStore : public TcpStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    auto backoff = std::chrono::microseconds(50);
    std::string v;
    while (!tryGet(key, v)) {
      if (Clock::now() >= deadline)
        CCLX_THROW(cclxTimeout, "store get timed out after %lld ms; missing key: %s",
                   (long long)timeout.count(), key.c_str());
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(2000));
    }
    return v;
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    auto deadline = Clock::now() + timeout;
    auto backoff = std::chrono::microseconds(50);
    std::vector<std::string> miss = missing(keys);
    while (!miss.empty()) {
      if (Clock::now() >= deadline)
        CCLX_THROW(cclxTimeout, "store wait timed out after %lld ms; missing keys: %s",
                   (long long)timeout.count(), joinKeys(miss).c_str());
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(2000));
      miss = missing(miss);
    }
  }

 protected:
  virtual bool tryGet(const std::string& key, std::string& v) = 0;
  virtual std::vector<std::string> missing(const std::vector<std::string>& keys) = 0;
};

void setNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    CCLX_WARN("setsockopt(TCP_NODELAY) failed: %s", std::strerror(errno));
}

// ---------------------------------------------------------------------------------------------
// Server.

class ServerStore final : public PollingStore {
 public:
  ServerStore(const std::string& host, int port, const std::string& jobId) : jobId_(jobId) {
    listenFd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listenFd_ < 0) CCLX_THROW(cclxSystemError, "socket() failed: %s", std::strerror(errno));
    int one = 1;
    if (::setsockopt(listenFd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
      int e = errno;
      ::close(listenFd_);
      CCLX_THROW(cclxSystemError, "setsockopt(SO_REUSEADDR) failed: %s", std::strerror(e));
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    bool loopback = host == "127.0.0.1" || host == "localhost";
    a.sin_addr.s_addr = htonl(loopback ? INADDR_LOOPBACK : INADDR_ANY);
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
    CCLX_INFO("store serving job '%s' on %s:%d", jobId_.c_str(), host.c_str(), port_);
  }

  ~ServerStore() override {
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
    bool greeted = false;
    std::string in;
  };

  void serve() {
    for (;;) {
      std::vector<pollfd> fds;
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listenFd_, POLLIN, 0});
      for (auto& c : clients_) fds.push_back({c.fd, POLLIN, 0});
      int r = ::poll(fds.data(), fds.size(), -1);
      if (r < 0) {
        if (errno == EINTR) continue;
        CCLX_WARN("store server poll() failed: %s; server stops", std::strerror(errno));
        return;
      }
      if (fds[0].revents) return;
      std::vector<size_t> dead;
      for (size_t i = 0; i < clients_.size(); ++i)
        if (fds[i + 2].revents && !serviceClient(clients_[i])) dead.push_back(i);
      for (size_t j = dead.size(); j-- > 0;) {
        ::close(clients_[dead[j]].fd);
        clients_.erase(clients_.begin() + long(dead[j]));
      }
      if (fds[1].revents & POLLIN) acceptOne();
    }
  }

  void acceptOne() {
    int fd = ::accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED)
        CCLX_WARN("store accept() failed: %s", std::strerror(errno));
      return;
    }
    setNoDelay(fd);
    Client c;
    c.fd = fd;
    clients_.push_back(std::move(c));
  }

  // Reads what is available and serves every complete request. False: drop the connection.
  bool serviceClient(Client& c) {
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
    while (c.in.size() >= 4) {
      uint32_t len;
      std::memcpy(&len, c.in.data(), 4);
      if (len > store::kMaxFrame) return false;
      if (c.in.size() < 4 + size_t(len)) break;
      std::string req = c.in.substr(4, len);
      c.in.erase(0, 4 + size_t(len));
      bool keep = true;
      std::string reply = handle(c, req, keep);
      try {
        store::sendFrame(c.fd, reply, Clock::now() + std::chrono::seconds(30), "client");
      } catch (const Error& e) {
        CCLX_WARN("store server: dropping a client: %s", e.what());
        return false;
      }
      if (!keep) return false;
    }
    return true;
  }

  std::string handle(Client& c, const std::string& req, bool& keep) {
    if (c.greeted) return table_.execute(req);
    store::Reader r(req);
    uint8_t cmd;
    std::string magic, job;
    keep = false;
    if (!r.u8(cmd) || cmd != store::HELLO || !r.str(magic) || magic != store::kMagic || !r.str(job))
      return store::Writer().u8(store::BAD_REQUEST).str("not a cclx store client").data();
    if (job != jobId_) {
      CCLX_WARN("store refused a client of job '%s' (this store belongs to job '%s')", job.c_str(),
                jobId_.c_str());
      return store::Writer().u8(store::REFUSED).str(jobId_).data();
    }
    keep = true;
    c.greeted = true;
    return store::Writer().u8(store::OK).data();
  }

  std::string jobId_;
  int listenFd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Client> clients_;  // touched only by the server thread (and the destructor)
  store::KvTable table_;
  std::thread thread_;
};

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

  void connectWithRetry(const std::string& host, int port, Clock::time_point deadline) {
    auto backoff = std::chrono::milliseconds(10);
    std::string lastErr;
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
          if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
            int fl = ::fcntl(fd, F_GETFL);
            if (fl < 0 || ::fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) {
              lastErr = strFormat("fcntl() failed: %s", std::strerror(errno));
              ::close(fd);
              continue;
            }
            setNoDelay(fd);
            ::freeaddrinfo(res);
            fd_ = fd;
            return;
          }
          lastErr = std::strerror(errno);
          ::close(fd);
        }
        ::freeaddrinfo(res);
      }
      auto now = Clock::now();
      if (now >= deadline)
        CCLX_THROW(cclxTimeout, "could not connect to the store at %s within %lld ms: %s",
                   peer_.c_str(), (long long)timeout_.count(), lastErr.c_str());
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

// ---------------------------------------------------------------------------------------------

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  void set(const std::string& k, const std::string& v) override { base_->set(prefix_ + k, v); }
  std::string get(const std::string& k, std::chrono::milliseconds t) override {
    return base_->get(prefix_ + k, t);
  }
  int64_t add(const std::string& k, int64_t d) override { return base_->add(prefix_ + k, d); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    base_->wait(full, t);
  }
  bool check(const std::string& k) override { return base_->check(prefix_ + k); }
  void erase(const std::string& k) override { base_->erase(prefix_ + k); }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::shared_ptr<TcpStore> TcpStore::create(const std::string& host, int port, bool isServer,
                                           const std::string& jobId,
                                           std::chrono::milliseconds timeout) {
  CCLX_ARG_CHECK(port >= 0 && port < 65536, "store port %d is outside [0, 65535]", port);
  CCLX_ARG_CHECK(!host.empty(), "store host is empty");
  CCLX_ARG_CHECK(timeout.count() > 0, "store timeout must be positive (got %lld ms)",
                 (long long)timeout.count());
  if (isServer) return std::make_shared<ServerStore>(host, port, jobId);
  CCLX_ARG_CHECK(port != 0, "a store client needs the server's port (got 0)");
  return std::make_shared<ClientStore>(host, port, jobId, timeout);
}

std::shared_ptr<Store> prefixStore(std::shared_ptr<Store> base, const std::string& prefix) {
  CCLX_ARG_CHECK(base != nullptr, "prefixStore: base store is null");
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

}  // namespace cclx
