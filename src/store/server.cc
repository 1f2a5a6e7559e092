// TcpStore server: one thread poll()s the listening socket, every connection and a wake-up pipe,
// and serves each complete request from the table. The destructor first lingers (bounded) while
// clients are still connected and using the store, so that the process that owns the store does
// not leave under a peer's request; then it wakes and joins the thread.
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
#include "store/store_impl.h"
#include "store/proto.h"

namespace cclx::store {

namespace {
// ---------------------------------------------------------------------------------------------
// Server.

class ServerStore final : public PollingStore {
 public:
  ServerStore(const std::string& host, int port, const std::string& jobId)
      : jobId_(jobId), host_(host) {
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
      nClients_.store(int(clients_.size()));
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
    nClients_.store(int(clients_.size()));
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
      lastRequest_.store(Clock::now().time_since_epoch().count());
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
  std::string host_;
  std::atomic<int> nClients_{0};
  std::atomic<Clock::rep> lastRequest_{0};  // steady-clock ticks of the last request served
  int listenFd_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::vector<Client> clients_;  // touched only by the server thread (and the destructor)
  store::KvTable table_;
  std::thread thread_;
};

}  // namespace

std::shared_ptr<TcpStore> makeServerStore(const std::string& host, int port,
                                          const std::string& jobId) {
  return std::make_shared<ServerStore>(host, port, jobId);
}

}  // namespace cclx::store
