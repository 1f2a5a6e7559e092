// Private to the store implementation: the polling base class and the two concrete stores.
#pragma once

#include <cclx/cclx.hpp>

#include <memory>
#include <string>
#include <vector>

namespace cclx::store {

/// get() and wait() on top of non-blocking primitives: poll with a growing back-off.
class PollingStore : public TcpStore {
 public:
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

 protected:
  virtual bool tryGet(const std::string& key, std::string& v) = 0;
  virtual std::vector<std::string> missing(const std::vector<std::string>& keys) = 0;
};

void setNoDelay(int fd);

std::shared_ptr<TcpStore> makeServerStore(const std::string& host, int port,
                                          const std::string& jobId);
std::shared_ptr<TcpStore> makeClientStore(const std::string& host, int port,
                                          const std::string& jobId,
                                          std::chrono::milliseconds timeout);

}  // namespace cclx::store
