// A new comm's rendezvous (bootstrap): every rank publishes its size, device type and host
// identity through the comm's namespace of the store; the result says who is where (hosts, local
// ranks) and carries a job token unique to this comm instance.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>

#include "base/error.h"
#include "core/comm/comm_internal.h"
#include "store/bootstrap.h"

namespace cclx {

namespace {

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

BootstrapInfo bootstrap(DeviceSpec device, const Options& opts, std::shared_ptr<Store> commStore,
                        int rank, int size) {
  BootstrapInfo info;
  info.rank = rank;
  info.size = size;
  info.opts = opts;
  info.cfg = config();
  info.device = device;
  info.store = std::move(commStore);
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
