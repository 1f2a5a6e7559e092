// File-descriptor passing between the processes of one host (see fd_pass.h). A datagram is a
// Message (magic, tag, how many descriptors ride along) plus that many SCM_RIGHTS descriptors
// (at most FdMailbox::kMaxFds).
#include "base/fd_pass.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <utility>

#include "base/error.h"
#include "base/log.h"

namespace cclx {

namespace {

constexpr uint32_t kMagic = 0x63666431;  // "cfd1"

struct Message {
  uint32_t magic;
  int32_t tag;
  uint32_t fds;
};

std::string toHex(const char* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(p[i]);
    s += digits[c >> 4];
    s += digits[c & 15];
  }
  return s;
}

int hexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The socket address that address() encoded; throws on anything that is not one.
socklen_t decodeAddress(const std::string& hex, sockaddr_un* a) {
  const size_t n = hex.size() / 2;
  CCLX_REQUIRE(hex.size() % 2 == 0 && n >= 1 && n <= sizeof(a->sun_path), cclxInvalidArgument,
               "fd mailbox: malformed address '%s'", hex.c_str());
  std::memset(a, 0, sizeof(*a));
  a->sun_family = AF_UNIX;
  for (size_t i = 0; i < n; ++i) {
    const int hi = hexDigit(hex[2 * i]), lo = hexDigit(hex[2 * i + 1]);
    CCLX_REQUIRE(hi >= 0 && lo >= 0, cclxInvalidArgument, "fd mailbox: malformed address '%s'",
                 hex.c_str());
    a->sun_path[i] = char(hi * 16 + lo);
  }
  return socklen_t(offsetof(sockaddr_un, sun_path) + n);
}

void closeAll(std::map<int, std::vector<int>>& got) {
  for (auto& [tag, fds] : got)
    for (int fd : fds) close(fd);
  got.clear();
}

std::string tagList(const std::set<int>& tags) {
  std::string s;
  for (int t : tags) s += strFormat("%s%d", s.empty() ? "" : ", ", t);
  return s;
}

void sleepMs(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

}  // namespace

void OwnedFd::reset() {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::string networkNamespaceId() {
  char link[64] = {};
  const ssize_t n = readlink("/proc/self/ns/net", link, sizeof(link) - 1);
  if (n <= 0) return "";
  const std::string s(link, size_t(n));  // "net:[4026531840]"
  const size_t open = s.find('['), close = s.find(']');
  if (open == std::string::npos || close == std::string::npos || close <= open + 1) return "";
  const std::string id = s.substr(open + 1, close - open - 1);
  return id.find_first_not_of("0123456789") == std::string::npos ? id : "";
}

FdMailbox::FdMailbox() {
  sock_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock_ < 0)
    CCLX_THROW(cclxSystemError, "fd mailbox: socket(AF_UNIX, SOCK_DGRAM) failed: %s",
               std::strerror(errno));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // An address of the family alone: the kernel binds a unique abstract name of its choice.
  if (bind(sock_, reinterpret_cast<const sockaddr*>(&a), sizeof(sa_family_t)) != 0) {
    const int err = errno;
    close(sock_);
    CCLX_THROW(cclxSystemError, "fd mailbox: binding an abstract address failed: %s",
               std::strerror(err));
  }
  socklen_t len = sizeof(a);
  if (getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int err = errno;
    close(sock_);
    CCLX_THROW(cclxSystemError, "fd mailbox: getsockname failed: %s", std::strerror(err));
  }
  const size_t pathLen = len > offsetof(sockaddr_un, sun_path)
                             ? size_t(len) - offsetof(sockaddr_un, sun_path)
                             : 0;
  if (pathLen < 2 || a.sun_path[0] != '\0') {
    close(sock_);
    CCLX_THROW(cclxSystemError, "fd mailbox: the kernel bound no abstract address (%zu bytes)",
               pathLen);
  }
  address_ = toHex(a.sun_path, pathLen);
}

FdMailbox::~FdMailbox() {
  if (sock_ >= 0) close(sock_);
}

void FdMailbox::send(const std::string& peerAddress, int fd, int tag,
                     std::chrono::milliseconds timeout) {
  sendMany(peerAddress, fd >= 0 ? std::vector<int>{fd} : std::vector<int>{}, tag, timeout);
}

void FdMailbox::sendMany(const std::string& peerAddress, const std::vector<int>& fds, int tag,
                         std::chrono::milliseconds timeout) {
  CCLX_REQUIRE(fds.size() <= kMaxFds, cclxInvalidArgument,
               "fd mailbox: %zu descriptors in one datagram (at most %zu)", fds.size(), kMaxFds);
  for (int fd : fds)
    CCLX_REQUIRE(fd >= 0, cclxInvalidArgument, "fd mailbox: a negative descriptor to send");
  sockaddr_un to;
  const socklen_t toLen = decodeAddress(peerAddress, &to);
  Message m{kMagic, tag, uint32_t(fds.size())};
  iovec iov{&m, sizeof(m)};
  alignas(cmsghdr) char control[CMSG_SPACE(kMaxFds * sizeof(int))];
  std::memset(control, 0, sizeof(control));
  msghdr mh{};
  mh.msg_name = &to;
  mh.msg_namelen = toLen;
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  if (!fds.empty()) {
    mh.msg_control = control;
    mh.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  long backoffMs = 1;
  for (;;) {
    const ssize_t k = sendmsg(sock_, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k == ssize_t(sizeof(m))) return;
    if (k >= 0)
      CCLX_THROW(cclxSystemError, "fd mailbox: sendmsg to %s sent %zd of %zu bytes",
                 peerAddress.c_str(), k, sizeof(m));
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) {  // the peer's queue is full: it has not read yet
      if (std::chrono::steady_clock::now() >= deadline)
        CCLX_THROW(cclxTimeout, "fd mailbox: the mailbox at %s stayed full for %lld ms",
                   peerAddress.c_str(), static_cast<long long>(timeout.count()));
      sleepMs(backoffMs);
      backoffMs = std::min(backoffMs * 2, 50L);
      continue;
    }
    if (err == ECONNREFUSED || err == ENOENT)
      CCLX_THROW(cclxSystemError,
                 "fd mailbox: no mailbox at %s (its process closed it or exited, or runs in "
                 "another network namespace): %s",
                 peerAddress.c_str(), std::strerror(err));
    CCLX_THROW(cclxSystemError, "fd mailbox: sendmsg to %s failed: %s", peerAddress.c_str(),
               std::strerror(err));
  }
}

std::map<int, int> FdMailbox::receive(const std::vector<int>& tags,
                                      std::chrono::milliseconds timeout) {
  std::map<int, std::vector<int>> many = receiveMany(tags, timeout);
  std::map<int, int> got;
  for (auto& [tag, fds] : many) {
    got[tag] = fds.empty() ? -1 : fds[0];
    for (size_t i = 1; i < fds.size(); ++i) close(fds[i]);  // more than one: only the first kept
  }
  return got;
}

std::map<int, std::vector<int>> FdMailbox::receiveMany(const std::vector<int>& tags,
                                                       std::chrono::milliseconds timeout) {
  std::set<int> pending(tags.begin(), tags.end());
  const size_t expected = pending.size();
  std::map<int, std::vector<int>> got;
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  auto timedOut = [&] {
    const long long waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
    CCLX_THROW(cclxTimeout,
               "timed out after %lld ms waiting for file descriptors from rank(s) %s (received "
               "%zu of %zu)",
               waited, tagList(pending).c_str(), expected - pending.size(), expected);
  };
  try {
    while (!pending.empty()) {
      const auto now = std::chrono::steady_clock::now();
      long long waitMs = 0;
      if (now < deadline)
        waitMs = std::min<long long>(
            std::chrono::ceil<std::chrono::milliseconds>(deadline - now).count(), INT_MAX);
      pollfd p{sock_, POLLIN, 0};
      const int ready = poll(&p, 1, int(waitMs));
      if (ready < 0) {
        if (errno == EINTR) continue;
        CCLX_THROW(cclxSystemError, "fd mailbox: poll failed: %s", std::strerror(errno));
      }
      if (ready == 0) {
        if (std::chrono::steady_clock::now() >= deadline) timedOut();
        continue;
      }
      Message m{};
      iovec iov{&m, sizeof(m)};
      // Room for twice the descriptors a sender may attach: a datagram with too many arrives
      // whole (and is dropped here, its descriptors closed) instead of truncated.
      alignas(cmsghdr) char control[CMSG_SPACE(2 * kMaxFds * sizeof(int))];
      msghdr mh{};
      mh.msg_iov = &iov;
      mh.msg_iovlen = 1;
      mh.msg_control = control;
      mh.msg_controllen = sizeof(control);
      const ssize_t k = recvmsg(sock_, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (k < 0) {
        const int err = errno;
        if (err == EINTR || err == EAGAIN || err == EWOULDBLOCK) continue;
        CCLX_THROW(cclxSystemError, "fd mailbox: recvmsg failed: %s", std::strerror(err));
      }
      std::vector<int> fds;
      for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; ++i) {
          int fd = -1;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds.push_back(fd);
        }
      }
      const bool wellFormed = k == ssize_t(sizeof(m)) &&
                              (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0 &&
                              m.magic == kMagic && fds.size() == m.fds;
      if (wellFormed && pending.count(m.tag)) {
        got[m.tag] = std::move(fds);
        pending.erase(m.tag);
        continue;
      }
      CCLX_WARN("fd mailbox: dropped a %s datagram (%zd bytes, tag %d, %zu descriptors)",
                wellFormed ? "repeated or unexpected" : "malformed", k, int(m.tag), fds.size());
      for (int fd : fds) close(fd);
      // Stray datagrams get no time beyond the deadline.
      if (std::chrono::steady_clock::now() >= deadline) timedOut();
    }
  } catch (...) {
    closeAll(got);
    throw;
  }
  return got;
}

}  // namespace cclx
