// TCP store framing and the server-side table.
#include "store/proto.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "store/auth.h"

namespace cclx::store {

bool Reader::u8(uint8_t& v) {
  if (pos_ + 1 > b_.size()) return false;
  v = uint8_t(b_[pos_++]);
  return true;
}
bool Reader::u32(uint32_t& v) {
  if (pos_ + 4 > b_.size()) return false;
  std::memcpy(&v, b_.data() + pos_, 4);
  pos_ += 4;
  return true;
}
bool Reader::i64(int64_t& v) {
  if (pos_ + 8 > b_.size()) return false;
  std::memcpy(&v, b_.data() + pos_, 8);
  pos_ += 8;
  return true;
}
bool Reader::str(std::string& s) {
  uint32_t n;
  if (!u32(n) || pos_ + n > b_.size()) return false;
  s.assign(b_.data() + pos_, n);
  pos_ += n;
  return true;
}

namespace {
int msLeft(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 60000 ? 60000 : int(left);
}

void waitFd(int fd, short events, Clock::time_point deadline, const char* peer) {
  for (;;) {
    pollfd p{fd, events, 0};
    int ms = msLeft(deadline);
    if (ms == 0) CCLX_THROW(cclxTimeout, "store %s did not answer within the timeout", peer);
    int r = ::poll(&p, 1, ms);
    if (r > 0) return;
    if (r < 0 && errno != EINTR)
      CCLX_THROW(cclxSystemError, "poll on store connection %s failed: %s", peer, std::strerror(errno));
  }
}

void sendAll(int fd, const char* p, size_t n, Clock::time_point deadline, const char* peer) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w;
      n -= size_t(w);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      waitFd(fd, POLLOUT, deadline, peer);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      CCLX_THROW(cclxRemoteError, "store connection %s lost while sending: %s", peer,
                 std::strerror(errno));
    }
  }
}

void recvAll(int fd, char* p, size_t n, Clock::time_point deadline, const char* peer) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r;
      n -= size_t(r);
    } else if (r == 0) {
      CCLX_THROW(cclxRemoteError, "store %s closed the connection (did its process exit?)", peer);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      waitFd(fd, POLLIN, deadline, peer);
    } else if (errno != EINTR) {
      CCLX_THROW(cclxRemoteError, "store connection %s failed while receiving: %s", peer,
                 std::strerror(errno));
    }
  }
}
}  // namespace

void sendFrame(int fd, const std::string& body, Clock::time_point deadline, const char* peer) {
  uint32_t n = uint32_t(body.size());
  if (body.size() > kMaxFrame)
    CCLX_THROW(cclxInvalidArgument, "store message of %zu bytes exceeds the 1 GiB limit", body.size());
  std::string frame(reinterpret_cast<const char*>(&n), 4);
  frame += body;
  sendAll(fd, frame.data(), frame.size(), deadline, peer);
}

std::string recvFrame(int fd, Clock::time_point deadline, const char* peer, uint32_t maxLen) {
  uint32_t n = 0;
  recvAll(fd, reinterpret_cast<char*>(&n), 4, deadline, peer);
  if (n > maxLen) CCLX_THROW(cclxRemoteError, "store %s sent a malformed frame", peer);
  std::string body(n, '\0');
  if (n) recvAll(fd, body.data(), n, deadline, peer);
  return body;
}

std::string authProof(bool client, const std::string& token, const std::string& serverNonce,
                      const std::string& clientNonce, const std::string& jobId) {
  Writer w;
  w.str(client ? "cclx-store-2 client proof" : "cclx-store-2 server proof")
      .str(serverNonce)
      .str(clientNonce)
      .str(jobId);
  Digest d = hmacSha256(token, w.data());
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

Take takeFrame(std::string& in, std::string& body) {
  if (in.size() < 4) return Take::kPartial;
  uint32_t len;
  std::memcpy(&len, in.data(), 4);
  if (len > kMaxFrame) return Take::kBad;
  if (in.size() < 4 + size_t(len)) return Take::kPartial;
  body.assign(in, 4, len);
  in.erase(0, 4 + size_t(len));
  return Take::kFrame;
}

void KvTable::set(const std::string& k, const std::string& v) {
  std::lock_guard<std::mutex> lk(mu_);
  kv_[k] = v;
}
bool KvTable::get(const std::string& k, std::string& v) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = kv_.find(k);
  if (it == kv_.end()) return false;
  v = it->second;
  return true;
}
int64_t KvTable::add(const std::string& k, int64_t delta) {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t cur = 0;
  auto it = kv_.find(k);
  if (it != kv_.end() && !it->second.empty()) cur = std::strtoll(it->second.c_str(), nullptr, 10);
  int64_t sum;
  if (__builtin_add_overflow(cur, delta, &sum))
    CCLX_THROW(cclxInvalidArgument,
               "store: adding %lld to key '%s' (now %lld) overflows a 64-bit integer; the value "
               "is unchanged", (long long)delta, k.c_str(), (long long)cur);
  kv_[k] = std::to_string(sum);
  return sum;
}
bool KvTable::check(const std::string& k) {
  std::lock_guard<std::mutex> lk(mu_);
  return kv_.count(k) != 0;
}
void KvTable::erase(const std::string& k) {
  std::lock_guard<std::mutex> lk(mu_);
  kv_.erase(k);
}
std::vector<std::string> KvTable::missing(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!kv_.count(k)) out.push_back(k);
  return out;
}

std::string KvTable::execute(const std::string& request) {
  Reader r(request);
  Writer w;
  uint8_t cmd;
  std::string k, v;
  int64_t delta;
  if (!r.u8(cmd)) return w.u8(BAD_REQUEST).data();
  switch (cmd) {
    case SET:
      if (!r.str(k) || !r.str(v)) break;
      set(k, v);
      return w.u8(OK).data();
    case GET:
      if (!r.str(k)) break;
      if (!get(k, v)) return w.u8(NOT_FOUND).data();
      return w.u8(OK).str(v).data();
    case ADD:
      if (!r.str(k) || !r.i64(delta)) break;
      try {
        return w.u8(OK).i64(add(k, delta)).data();
      } catch (const Error&) {
        break;  // the sum overflows: refused, nothing changed
      }
    case CHECK:
      if (!r.str(k)) break;
      return w.u8(check(k) ? OK : NOT_FOUND).data();
    case ERASE:
      if (!r.str(k)) break;
      erase(k);
      return w.u8(OK).data();
    case MISSING: {
      uint32_t n;
      if (!r.u32(n)) break;
      std::vector<std::string> keys;
      bool good = true;
      for (uint32_t i = 0; i < n && good; ++i) good = r.str(k) && (keys.push_back(k), true);
      if (!good) break;
      auto miss = missing(keys);
      w.u8(OK).u32(uint32_t(miss.size()));
      for (const auto& m : miss) w.str(m);
      return w.data();
    }
    default:
      break;
  }
  return Writer().u8(BAD_REQUEST).data();
}

}  // namespace cclx::store
