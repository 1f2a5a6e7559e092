// The shared-GPU mode's rendezvous without NCCL (shared_internal.h): the id's stamp, the store of
// the process that made the id, and the decision every rank of a new comm takes alike.
//
// The stamp. NCCL's unique id is 128 bytes, of which NCCL 2.19..2.30 fill the first 40 (a magic
// and its root's socket address) and zero the rest. ncclGetUniqueId writes the drop-in's
// rendezvous into the last 40: a magic, the IPv4 address and port of this process's store (one
// TCP server per process, started by the first stamp), the server's random token (the store
// refuses clients that do not present it: only holders of an id get in) and a random nonce that
// names the comm's keys, plus a check word. NCCL ignores those bytes; an id whose tail is not
// zero (a future NCCL using it) is not stamped, and then never makes a shared comm.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "core/settings/config.h"
#include "base/error.h"
#include "base/log.h"
#include "nccl_dropin/shared/shared_internal.h"
#include "store/auth.h"
#include "store/bootstrap.h"

namespace cclx {
namespace dropin {
namespace shared {

namespace {

constexpr size_t kStampAt = 88;  // the stamp's 40 bytes end the 128-byte id
constexpr char kMagic[8] = {'c', 'c', 'l', 'x', 'S', 'H', 'R', '1'};

// From the kernel's random source (the token is the store's secret), else a seeded generator.
uint64_t random64() {
  uint64_t v = 0;
  while (v == 0) {
    try {
      std::memcpy(&v, store::randomBytes(sizeof(v)).data(), sizeof(v));
      continue;
    } catch (const Error&) {
    }
    static std::mutex mu;
    static std::mt19937_64 g = [] {
      std::random_device rd;
      return std::mt19937_64((uint64_t(rd()) << 32) ^ rd() ^ uint64_t(::getpid()) ^
                             uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()));
    }();
    std::lock_guard<std::mutex> lk(mu);
    v = g();
  }
  return v;
}

uint64_t checkWord(const Stamp& s) {
  return mix64(s.token ^ mix64(s.nonce ^ (uint64_t(s.ipv4) << 16 | s.port)) ^ 0x5eed5eedcc1d0001ull);
}

std::string hex(uint64_t v) { return strFormat("%016llx", static_cast<unsigned long long>(v)); }

std::string ipString(uint32_t ipv4) {
  char buf[INET_ADDRSTRLEN] = {0};
  in_addr a{};
  a.s_addr = ipv4;
  return ::inet_ntop(AF_INET, &a, buf, sizeof(buf)) ? std::string(buf) : std::string("127.0.0.1");
}

// The address peers reach this process at: NCCL's own bootstrap address when the id carries an
// IPv4 one (so that the store is reachable wherever NCCL's root is), else the host name's.
uint32_t advertisedAddress(const ncclUniqueId& id) {
  sockaddr_in sa{};
  std::memcpy(&sa, id.internal + 8, sizeof(sa));  // after NCCL's 8-byte magic
  if (sa.sin_family == AF_INET && sa.sin_addr.s_addr != 0 &&
      sa.sin_addr.s_addr != htonl(INADDR_ANY))
    return sa.sin_addr.s_addr;
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) == 0) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host, nullptr, &hints, &res) == 0 && res) {
      const uint32_t a = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr;
      ::freeaddrinfo(res);
      return a;
    }
  }
  return htonl(INADDR_LOOPBACK);
}

// This process's store server (per pid: a forked child does not inherit the serving thread).
struct Server {
  pid_t pid = 0;
  uint64_t token = 0;
  uint32_t ipv4 = 0;  // what every stamp advertises (the interface it listens on)
  std::shared_ptr<TcpStore> store;
};
std::mutex gMu;
Server& server() {
  static auto* s = new Server();  // never destroyed: the process may exit while it serves
  return *s;
}
std::map<std::string, std::shared_ptr<TcpStore>>& clients() {  // "ip:port:token" -> connection
  static auto* m = new std::map<std::string, std::shared_ptr<TcpStore>>();
  return *m;
}
pid_t gClientsPid = 0;

// At exit the server goes the way of every cclx store (store/server.cc): it lingers, at most
// 5 s, while a peer is still using it, so that a rank that ends first does not pull the store
// from under a peer's last request.
void releaseServerAtExit() {
  std::shared_ptr<TcpStore> s;
  {
    std::lock_guard<std::mutex> lk(gMu);
    if (server().pid == ::getpid()) s = std::move(server().store);
  }
  s.reset();
}

}  // namespace

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::chrono::milliseconds sharedTimeout() { return defaultTimeout(); }

std::chrono::milliseconds decisionTimeout() {
  const Config& cfg = config();
  if (cfg.timeoutMs >= 0) return std::chrono::milliseconds(cfg.timeoutMs);
  if (cfg.defaultTimeoutSet && cfg.defaultTimeoutMs > 0)
    return std::min(std::chrono::milliseconds(cfg.defaultTimeoutMs), kInfiniteTimeout);
  return kInfiniteTimeout;
}

void stampId(ncclUniqueId* id) {
  if (!id) return;
  try {
    if (config().dropinShared == 0) return;  // never shared: NCCL's id as it is
  } catch (const Error&) {
    // A malformed setting fails the comm's creation (with its message); stamp as for auto.
  }
  for (size_t i = kStampAt; i < sizeof(id->internal); ++i)
    if (id->internal[i] != 0) {
      CCLX_INFO("NCCL drop-in: the loaded NCCL fills every byte of its unique id: comms made "
                "from it never run with ranks sharing a GPU");
      return;
    }
  Stamp s;
  try {
    std::lock_guard<std::mutex> lk(gMu);
    Server& sv = server();
    if (!sv.store || sv.pid != ::getpid()) {
      const uint64_t token = random64();
      const uint32_t ip = advertisedAddress(*id);
      // Listens on every interface (the address is not loopback's) or on loopback only.
      const std::string host = ip == htonl(INADDR_LOOPBACK) ? "127.0.0.1" : ipString(ip);
      // The id's token is the store's job id and its secret: only holders of the id get in.
      const std::string secret = "nccl-dropin-" + hex(token);
      sv.store = TcpStore::create(host, 0, true, secret, std::chrono::milliseconds(600000), secret);
      if (sv.pid == 0) std::atexit(releaseServerAtExit);
      sv.pid = ::getpid();
      sv.token = token;
      sv.ipv4 = ip;
      CCLX_INFO("NCCL drop-in: rendezvous store for comms whose ranks share a GPU on %s:%d",
                host.c_str(), sv.store->port());
    }
    s.ipv4 = sv.ipv4;
    s.port = uint16_t(sv.store->port());
    s.token = sv.token;
  } catch (const std::exception& e) {
    CCLX_WARN("NCCL drop-in: no rendezvous store (%s): comms made from this id never run with "
              "ranks sharing a GPU", e.what());
    return;
  }
  s.nonce = random64();
  char* p = id->internal + kStampAt;
  std::memcpy(p, kMagic, 8);
  std::memcpy(p + 8, &s.ipv4, 4);
  std::memcpy(p + 12, &s.port, 2);
  std::memcpy(p + 16, &s.token, 8);
  std::memcpy(p + 24, &s.nonce, 8);
  const uint64_t check = checkWord(s);
  std::memcpy(p + 32, &check, 8);
}

bool readStamp(const ncclUniqueId& id, Stamp& s) {
  const char* p = id.internal + kStampAt;
  if (std::memcmp(p, kMagic, 8) != 0) return false;
  std::memcpy(&s.ipv4, p + 8, 4);
  std::memcpy(&s.port, p + 12, 2);
  std::memcpy(&s.token, p + 16, 8);
  std::memcpy(&s.nonce, p + 24, 8);
  uint64_t check = 0;
  std::memcpy(&check, p + 32, 8);
  return check == checkWord(s) && s.port != 0;
}

std::shared_ptr<Store> storeOf(const Stamp& s, const std::string& prefix,
                               std::chrono::milliseconds timeout) {
  std::shared_ptr<TcpStore> base;
  {
    std::lock_guard<std::mutex> lk(gMu);
    const Server& sv = server();
    if (sv.store && sv.pid == ::getpid() && sv.token == s.token) base = sv.store;
    if (gClientsPid != ::getpid()) {  // a forked child makes connections of its own
      clients().clear();
      gClientsPid = ::getpid();
    }
    if (!base) {
      const std::string key = ipString(s.ipv4) + ":" + std::to_string(s.port) + ":" + hex(s.token);
      auto it = clients().find(key);
      if (it != clients().end()) base = it->second;
    }
  }
  if (!base) {
    // Connecting retries until the timeout; not under the lock (another comm may be connecting).
    const std::string secret = "nccl-dropin-" + hex(s.token);
    auto made = TcpStore::create(ipString(s.ipv4), s.port, false, secret, timeout, secret);
    std::lock_guard<std::mutex> lk(gMu);
    const std::string key = ipString(s.ipv4) + ":" + std::to_string(s.port) + ":" + hex(s.token);
    auto& slot = clients()[key];
    if (!slot) slot = made;
    base = slot;
  }
  return prefixStore(base, prefix);
}

// Two barriers over the store, by counters (a constant number of requests per rank):
//   1. every rank adds one to the counter of its GPU ("<host>|<PCI bus id>"), then checks in;
//   2. once all checked in, every rank whose GPU's counter exceeds one (or that forces it) adds
//      one to "shared", then checks in again; once all did, "shared" is the verdict.
bool decideShared(Store& s, int rank, int nranks, const std::string& gpu, bool force,
                  std::chrono::milliseconds timeout) {
  std::vector<int> all(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) all[size_t(r)] = r;
  const std::string what = strFormat("NCCL drop-in: rank %d of %d deciding whether ranks share a GPU",
                                     rank, nranks);
  const std::string gpuKey = "gpu/" + gpu;
  s.add(gpuKey, 1);
  s.set("in/" + std::to_string(rank), "1");
  storeWaitRanks(s, "in", all, timeout, what);
  if (force || s.add(gpuKey, 0) > 1) s.add("shared", 1);
  s.set("voted/" + std::to_string(rank), "1");
  storeWaitRanks(s, "voted", all, timeout, what);
  return s.add("shared", 0) > 0;
}

}  // namespace shared
}  // namespace dropin
}  // namespace cclx
