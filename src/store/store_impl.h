// Private to the store implementation: the polling base class and the two concrete stores.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace cclx::store {

/// How often a long wait (connecting to the store, rendezvous) logs that it is still waiting.
constexpr std::chrono::seconds kWaitReportEvery{10};

/// What the server admits before a client has authenticated (docs/design/rendezvous.md, "Store
/// authentication"). Tests shorten the deadline.
struct ServerLimits {
  std::chrono::milliseconds handshakeTimeout{5000};  // from accept to a verified AUTH
  size_t maxPending = 64;  // unauthenticated connections at once; a new one evicts the oldest
  std::chrono::milliseconds evictAfter{100};  // ... once that one had this long to answer
};

/// The server's connections (a test hook; -1 / 0 for a client).
struct ServerStats {
  int authenticated = -1;     // connections that proved the token
  int pending = -1;           // connections still in the handshake
  size_t pendingBytes = 0;    // bytes buffered for pending connections
  uint64_t refused = 0;       // connections closed before authenticating (since the start)
};

/// get() and wait() on top of non-blocking primitives: poll with a growing back-off.
class PollingStore : public TcpStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  /// "host:port" of the server.
  virtual std::string address() const = 0;
  /// True for the server side (this process serves the store).
  virtual bool serving() const { return false; }
  /// Server: clients connected now; client: -1.
  virtual int clients() const { return -1; }
  virtual ServerStats serverStats() const { return {}; }

 protected:
  virtual bool tryGet(const std::string& key, std::string& v) = 0;
  virtual std::vector<std::string> missing(const std::vector<std::string>& keys) = 0;
};

void setNoDelay(int fd);

/// The TCP store under `s` (looking through prefix views), or nullptr for another kind of store.
const PollingStore* tcpStoreUnder(const Store& s);

/// True for 127.0.0.0/8 (`addr` in network byte order).
bool isLoopback(uint32_t addr);

/// Serves job `jobId` on host:port. Without a token only loopback addresses may be served: a
/// host that is not one is refused (cclxInvalidArgument naming CCLX_STORE_TOKEN), and so is a
/// connection from a peer that is not one.
std::shared_ptr<TcpStore> makeServerStore(const std::string& host, int port,
                                          const std::string& jobId, const std::string& token,
                                          const ServerLimits& limits = {});
std::shared_ptr<TcpStore> makeClientStore(const std::string& host, int port,
                                          const std::string& jobId, const std::string& token,
                                          std::chrono::milliseconds timeout);

}  // namespace cclx::store
