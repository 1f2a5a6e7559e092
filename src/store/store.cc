// TcpStore front door, the polling get()/wait() shared by server and client, and prefixStore.
// The server lives in server.cc, the client in client.cc, the wire format in proto.h, the
// handshake's primitives in auth.h.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "store/store_impl.h"
#include "store/proto.h"

namespace cclx {

namespace store {

namespace {
std::string joinKeys(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size() && i < 16; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > 16) s += strFormat(", ... (%zu in all)", keys.size());
  return s;
}
}  // namespace

std::string PollingStore::get(const std::string& key, std::chrono::milliseconds timeout) {
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

void PollingStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
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

void setNoDelay(int fd) {
  int one = 1;
  if (::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
    CCLX_WARN("setsockopt(TCP_NODELAY) failed: %s", std::strerror(errno));
}

}  // namespace store

namespace {
constexpr size_t kMinTokenChars = 16;
// ---------------------------------------------------------------------------------------------

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}
  const Store& base() const { return *base_; }
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
                                           std::chrono::milliseconds timeout,
                                           const std::string& token) {
  CCLX_ARG_CHECK(port >= 0 && port < 65536, "store port %d is outside [0, 65535]", port);
  CCLX_ARG_CHECK(!host.empty(), "store host is empty");
  CCLX_ARG_CHECK(timeout.count() > 0, "store timeout must be positive (got %lld ms)",
                 (long long)timeout.count());
  CCLX_ARG_CHECK(token.empty() || token.size() >= kMinTokenChars,
                 "the store's token (CCLX_STORE_TOKEN) has %zu characters; it needs at least %zu "
                 "(e.g. export CCLX_STORE_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d "
                 "' \\n'))", token.size(), kMinTokenChars);
  if (isServer) return store::makeServerStore(host, port, jobId, token);
  CCLX_ARG_CHECK(port != 0, "a store client needs the server's port (got 0)");
  return store::makeClientStore(host, port, jobId, token, timeout);
}

const store::PollingStore* store::tcpStoreUnder(const Store& s) {
  const Store* p = &s;
  while (auto* v = dynamic_cast<const PrefixStore*>(p)) p = &v->base();
  return dynamic_cast<const PollingStore*>(p);
}

std::shared_ptr<Store> prefixStore(std::shared_ptr<Store> base, const std::string& prefix) {
  CCLX_ARG_CHECK(base != nullptr, "prefixStore: base store is null");
  return std::make_shared<PrefixStore>(std::move(base), prefix);
}

}  // namespace cclx

