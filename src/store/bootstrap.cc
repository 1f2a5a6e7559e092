// Rendezvous through the store: every rank's record, waits that name the missing ranks, failures
// posted for the others, host identities.
#include "store/bootstrap.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "base/error.h"
#include "base/log.h"
#include "store/store_impl.h"

namespace cclx {

namespace {

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 32) {
      s += strFormat(", ... (%zu in all)", ranks.size());
      break;
    }
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

using Clock = std::chrono::steady_clock;

long long secondsOf(Clock::duration d) {
  return (long long)std::chrono::duration_cast<std::chrono::seconds>(d).count();
}

// A store operation that failed because the connection to the server broke (its process left).
bool storeLost(const Error& e) {
  return e.code() == cclxRemoteError || e.code() == cclxSystemError;
}

std::vector<int> missingRanks(Store& store, const std::vector<std::string>& keys,
                              const std::vector<int>& ranks) {
  std::vector<int> missing;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool present = false;
    try {
      present = store.check(keys[i]);
    } catch (const Error&) {
    }
    if (!present) missing.push_back(ranks[i]);
  }
  return missing;
}

}  // namespace

StoreFacts storeFacts(const Store& s) {
  StoreFacts f;
  if (const store::PollingStore* t = store::tcpStoreUnder(s)) {
    f.address = t->address();
    f.serving = t->serving();
    f.clients = t->clients();
    f.id = t;
  }
  return f;
}

// The failure another rank posted in `store` (none when absent or posted by `rank`).
std::optional<Error> postedFailure(Store& store, int rank) {
  if (!store.check("failed")) return std::nullopt;
  std::string v = store.get("failed", std::chrono::seconds(5));
  int code = 0, who = -1, consumed = 0;
  if (std::sscanf(v.c_str(), "%d|%d|%n", &code, &who, &consumed) != 2 || consumed == 0)
    return Error(cclxRemoteError, "another rank failed (its report is malformed: " + v + ")");
  if (who == rank) return std::nullopt;
  return Error(code == cclxTimeout ? cclxTimeout : cclxRemoteError,
               strFormat("rank %d failed: %s", who, v.c_str() + consumed));
}

void throwPostedFailure(Store& store, int rank) {
  if (auto e = postedFailure(store, rank)) throw *e;
}

void postFailure(Store& store, int rank, int size, const Error& e,
                 std::chrono::milliseconds timeout, bool awaitAbsent) {
  if (size < 1 || rank < 0 || rank >= size) return;
  try {
    if (!store.check("failed"))
      store.set("failed", strFormat("%d|%d|%s", int(e.code()), rank, e.what()));
    store.set("failed_ack/" + std::to_string(rank), "1");
  } catch (const Error& pe) {
    CCLX_INFO("could not tell the other ranks that this one failed: %s", pe.what());
    return;
  }
  if (size == 1 || !storeFacts(store).serving) return;
  // This process serves the store: stay until the others have read the failure.
  // (Acknowledgements are awaited only from ranks that arrived, i.e. published their "host/<r>"
  // record in bootstrap(), unless awaitAbsent.)
  const auto bound = std::min<std::chrono::milliseconds>(timeout, std::chrono::seconds(10));
  const auto deadline = Clock::now() + bound;
  for (;;) {
    std::vector<int> pending;
    try {
      for (int r = 0; r < size; ++r)
        if (r != rank && !store.check("failed_ack/" + std::to_string(r)) &&
            (awaitAbsent || store.check("host/" + std::to_string(r))))
          pending.push_back(r);
    } catch (const Error&) {
      return;
    }
    if (pending.empty() || (!awaitAbsent && storeFacts(store).clients == 0)) return;
    if (Clock::now() >= deadline) {
      CCLX_INFO("leaving before rank(s) %s saw this rank's failure", rankList(pending).c_str());
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void storeWaitRanks(Store& store, const std::string& key, const std::vector<int>& ranks,
                    std::chrono::milliseconds timeout, const std::string& what,
                    std::chrono::milliseconds reportEvery) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(key + "/" + std::to_string(r));
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto nextReport = start + reportEvery;
  constexpr auto kSlice = std::chrono::milliseconds(100);  // how soon a posted failure is seen
  for (;;) {
    std::optional<Error> posted;
    bool arrived = false;
    try {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        store.wait(keys, std::clamp(left, std::chrono::milliseconds(1), kSlice));
        arrived = true;
      } catch (const Error& e) {
        if (e.code() != cclxTimeout) throw;
        posted = postedFailure(store, -1);
      }
    } catch (const Error& e) {
      if (e.code() != cclxTimeout && storeLost(e)) {
        std::string at = storeFacts(store).address;
        CCLX_THROW(cclxTimeout,
                   "%s: lost the store%s%s (%s): rank 0, which serves it, left before every rank "
                   "arrived",
                   what.c_str(), at.empty() ? "" : " at ", at.c_str(), e.what());
      }
      if (e.code() != cclxTimeout) throw;
    }
    if (posted) throw *posted;
    if (arrived) return;
    auto now = Clock::now();
    if (now >= deadline)
      CCLX_THROW(cclxTimeout, "%s: rank(s) %s did not arrive within %lld ms", what.c_str(),
                 rankList(missingRanks(store, keys, ranks)).c_str(), (long long)timeout.count());
    if (now >= nextReport) {
      std::string at = storeFacts(store).address;
      CCLX_WARN("%s: waiting for rank(s) %s%s%s, %lld s of %lld s", what.c_str(),
                rankList(missingRanks(store, keys, ranks)).c_str(), at.empty() ? "" : " at ",
                at.c_str(), secondsOf(now - start), secondsOf(timeout));
      while (nextReport <= now) nextReport += reportEvery;
    }
  }
}

std::vector<std::string> storeAllGather(Store& store, const std::string& key,
                                        const std::string& value, int rank, int size,
                                        std::chrono::milliseconds timeout, const std::string& what) {
  store.set(key + "/" + std::to_string(rank), value);
  std::vector<int> all(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) all[size_t(r)] = r;
  storeWaitRanks(store, key, all, timeout, what);
  std::vector<std::string> out(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    out[size_t(r)] = r == rank ? value : store.get(key + "/" + std::to_string(r), timeout);
  return out;
}

std::string hostIdentity() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0)
    CCLX_THROW(cclxSystemError, "gethostname() failed: %s", std::strerror(errno));
  std::string boot;
  int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char b[64] = {0};
    ssize_t n = ::read(fd, b, sizeof(b) - 1);
    ::close(fd);
    if (n > 0) boot.assign(b, size_t(n));
    while (!boot.empty() && (boot.back() == '\n' || boot.back() == ' ')) boot.pop_back();
  }
  return std::string(host) + "/" + boot;
}

std::string nextCommPrefix(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, int> counts;
  std::lock_guard<std::mutex> lk(mu);
  int k = counts[name]++;
  return name + "/" + std::to_string(k) + "/";
}

}  // namespace cclx
