// Rendezvous through the store: host identities, local ranks, and a job token unique to this
// comm instance.
#include "store/bootstrap.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "core/error.h"
#include "core/log.h"

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

std::string randomToken() {
  unsigned char b[8];
  bool ok = false;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ok = ::read(fd, b, sizeof(b)) == ssize_t(sizeof(b));
    ::close(fd);
  }
  if (!ok) {
    std::random_device rd;
    std::mt19937_64 g(rd() ^ uint64_t(::getpid()) ^
                      uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
    uint64_t v = g();
    std::memcpy(b, &v, sizeof(b));
  }
  std::string s;
  for (unsigned char c : b) s += strFormat("%02x", c);
  return s;
}

}  // namespace

void storeWaitRanks(Store& store, const std::string& key, const std::vector<int>& ranks,
                    std::chrono::milliseconds timeout, const std::string& what) {
  std::vector<std::string> keys;
  for (int r : ranks) keys.push_back(key + "/" + std::to_string(r));
  try {
    store.wait(keys, timeout);
  } catch (const Error& e) {
    if (e.code() != cclxTimeout) throw;
    std::vector<int> missing;
    for (size_t i = 0; i < keys.size(); ++i) {
      bool present = false;
      try {
        present = store.check(keys[i]);
      } catch (const Error&) {
      }
      if (!present) missing.push_back(ranks[i]);
    }
    CCLX_THROW(cclxTimeout, "%s: rank(s) %s did not arrive within %lld ms", what.c_str(),
               rankList(missing).c_str(), (long long)timeout.count());
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

BootstrapInfo bootstrap(DeviceSpec device, const Options& opts, std::shared_ptr<Store> rootStore,
                        const std::string& prefix, int rank, int size) {
  BootstrapInfo info;
  info.rank = rank;
  info.size = size;
  info.opts = opts;
  info.cfg = config();
  info.device = device;
  info.store = prefixStore(rootStore, prefix);
  auto timeout = opts.timeout;
  std::string what = strFormat("rendezvous of comm '%s'", opts.name.c_str());

  // Rank 0 publishes the token first, so everyone can read it once all identities are in.
  if (rank == 0) info.store->set("token", randomToken());
  std::string mine = strFormat("%d|%d|%s", size, int(device.type), hostIdentity().c_str());
  auto all = storeAllGather(*info.store, "host", mine, rank, size, timeout, what);
  info.jobId = info.store->get("token", timeout);

  std::map<std::string, int> hostIndex;
  info.hostOf.resize(size_t(size));
  for (int r = 0; r < size; ++r) {
    const std::string& v = all[size_t(r)];
    int theirSize = -1, theirDev = -1, consumed = 0;
    if (std::sscanf(v.c_str(), "%d|%d|%n", &theirSize, &theirDev, &consumed) != 2 || consumed == 0)
      CCLX_THROW(cclxRemoteError, "%s: rank %d published a malformed record", what.c_str(), r);
    if (theirSize != size)
      CCLX_THROW(cclxInvalidUsage, "%s: rank %d was created with size %d, this rank with size %d",
                 what.c_str(), r, theirSize, size);
    if (theirDev != int(device.type))
      CCLX_THROW(cclxInvalidUsage, "%s: rank %d uses device type %s, this rank %s", what.c_str(),
                 r, theirDev == DeviceSpec::CUDA ? "cuda" : "cpu",
                 device.type == DeviceSpec::CUDA ? "cuda" : "cpu");
    std::string host = v.substr(size_t(consumed));
    auto it = hostIndex.find(host);
    if (it == hostIndex.end()) it = hostIndex.emplace(host, int(hostIndex.size())).first;
    info.hostOf[size_t(r)] = it->second;
  }
  info.numHosts = int(hostIndex.size());
  for (int r = 0; r < size; ++r)
    if (info.hostOf[size_t(r)] == info.hostOf[size_t(rank)]) {
      if (r == rank) info.localRank = int(info.localRanks.size());
      info.localRanks.push_back(r);
    }
  info.localSize = int(info.localRanks.size());
  return info;
}

}  // namespace cclx
