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

 protected:
  virtual bool tryGet(const std::string& key, std::string& v) = 0;
  virtual std::vector<std::string> missing(const std::vector<std::string>& keys) = 0;
};

void setNoDelay(int fd);

/// The TCP store under `s` (looking through prefix views), or nullptr for another kind of store.
const PollingStore* tcpStoreUnder(const Store& s);

std::shared_ptr<TcpStore> makeServerStore(const std::string& host, int port,
                                          const std::string& jobId);
std::shared_ptr<TcpStore> makeClientStore(const std::string& host, int port,
                                          const std::string& jobId,
                                          std::chrono::milliseconds timeout);

}  // namespace cclx::store
