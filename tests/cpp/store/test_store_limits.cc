// What the store admits before a client has authenticated: a huge length or garbage is closed
// at once without the server buffering it, slow and idle clients are closed at the handshake
// deadline, the pending connections are capped, and 200 concurrent bad clients do not stop a
// real job of 4 ranks from forming (and running an allreduce checked against a reference).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "helpers/mp.h"
#include "store/auth.h"
#include "store/proto.h"
#include "store/store_impl.h"

using namespace std::chrono_literals;
using cclx::TcpStore;
namespace st = cclx::store;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kToken = "0123456789abcdef0123456789abcdef";
size_t defaultCap() { return st::ServerLimits{}.maxPending; }

int rawConnect(int port, int recvTimeoutMs = 5000) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{recvTimeoutMs / 1000, (recvTimeoutMs % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string frame(const std::string& body) {
  uint32_t n = uint32_t(body.size());
  return std::string(reinterpret_cast<const char*>(&n), 4) + body;
}

// 1: the server closed the connection; 0: the receive timed out; -1: data came.
int waitClosed(int fd) {
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return 1;
    if (n < 0) return errno == ECONNRESET ? 1 : 0;
  }
}

std::string readChallenge(int fd) {
  uint32_t n = 0;
  if (::recv(fd, &n, 4, MSG_WAITALL) != 4 || n > 4096) return {};
  std::string body(n, '\0');
  if (::recv(fd, body.data(), n, MSG_WAITALL) != ssize_t(n)) return {};
  st::Reader r(body);
  uint8_t cmd = 0, f = 0;
  std::string magic, nonce;
  if (!r.u8(cmd) || !r.str(magic) || !r.u8(f) || !r.str(nonce)) return {};
  return nonce;
}

const st::PollingStore& polling(const std::shared_ptr<TcpStore>& s) {
  return *st::tcpStoreUnder(*s);
}

// Waits until the server has no pending connection (or 5 s pass); returns its stats.
st::ServerStats settle(const std::shared_ptr<TcpStore>& s) {
  auto t0 = Clock::now();
  st::ServerStats x = polling(s).serverStats();
  while (x.pending != 0 && Clock::now() - t0 < 5s) {
    std::this_thread::sleep_for(5ms);
    x = polling(s).serverStats();
  }
  return x;
}

TEST(StoreLimits, HugeLengthIsClosedAtOnceWithoutBuffering) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s, kToken);
  for (uint32_t len : {0xffffffffu, 1u << 30, st::kMaxHandshakeFrame + 1}) {
    int fd = rawConnect(server->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(readChallenge(fd).size(), 32u);
    auto t0 = Clock::now();
    std::string head(reinterpret_cast<const char*>(&len), 4);
    head += std::string(1000, 'x');  // part of the announced body
    ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), ssize_t(head.size()));
    EXPECT_EQ(waitClosed(fd), 1) << "length " << len;
    EXPECT_LT(Clock::now() - t0, 1s) << "length " << len;
    ::close(fd);
  }
  st::ServerStats x = settle(server);
  EXPECT_EQ(x.pending, 0);
  EXPECT_EQ(x.pendingBytes, 0u);
  EXPECT_EQ(x.authenticated, 0);
  EXPECT_GE(x.refused, 3u);
  // Still serving.
  auto c = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s, kToken);
  c->set("a", "b");
  EXPECT_EQ(server->get("a", 1s), "b");
}

TEST(StoreLimits, GarbageIsClosedAndNothingIsBufferedBeyondOneFrame) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s, kToken);
  std::mt19937 g(11);
  for (size_t len : {size_t(3), size_t(64), size_t(4100), size_t(100000)}) {
    int fd = rawConnect(server->port());
    ASSERT_GE(fd, 0);
    std::string junk(len, '\0');
    for (auto& c : junk) c = char(g());
    std::memcpy(junk.data(), "\x10\x00\x00\x00", std::min<size_t>(4, len));  // a 16-byte frame
    (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    if (len >= 20) {
      EXPECT_EQ(waitClosed(fd), 1) << "garbage of " << len << " bytes";
    }
    st::ServerStats x = polling(server).serverStats();
    EXPECT_LE(x.pendingBytes, size_t(4 + st::kMaxHandshakeFrame)) << len;
    ::close(fd);
  }
  st::ServerStats x = settle(server);
  EXPECT_EQ(x.pending, 0);
  EXPECT_EQ(x.pendingBytes, 0u);
}

TEST(StoreLimits, SlowAndIdleClientsAreClosedAtTheHandshakeDeadline) {
  st::ServerLimits lim;
  lim.handshakeTimeout = 300ms;
  auto server = st::makeServerStore("127.0.0.1", 0, "job", kToken, lim);
  int idle = rawConnect(server->port());
  int slow = rawConnect(server->port());
  ASSERT_GE(idle, 0);
  ASSERT_GE(slow, 0);
  auto t0 = Clock::now();
  uint32_t len = 100;
  ASSERT_EQ(::send(slow, &len, 4, MSG_NOSIGNAL), 4);
  std::thread trickle([&] {  // one byte every 50 ms: never completes within the deadline
    for (int i = 0; i < 40; ++i) {
      if (::send(slow, "z", 1, MSG_NOSIGNAL) != 1) return;
      std::this_thread::sleep_for(50ms);
    }
  });
  ASSERT_EQ(readChallenge(idle).size(), 32u);
  EXPECT_EQ(waitClosed(idle), 1);
  auto idleClosed = Clock::now() - t0;
  trickle.join();
  EXPECT_GE(idleClosed, 250ms);
  EXPECT_LT(idleClosed, 2s);
  std::string challenge = readChallenge(slow);
  EXPECT_EQ(waitClosed(slow), 1);
  ::close(idle);
  ::close(slow);
  EXPECT_EQ(settle(server).pending, 0);
}

TEST(StoreLimits, PendingConnectionsAreCappedAndARealClientStillGetsIn) {
  st::ServerLimits lim;
  lim.maxPending = 8;
  auto server = st::makeServerStore("127.0.0.1", 0, "job", kToken, lim);
  std::vector<int> fds;
  for (int i = 0; i < 100; ++i) {
    int fd = rawConnect(server->port(), 100);
    if (fd >= 0) fds.push_back(fd);
  }
  std::this_thread::sleep_for(300ms);
  st::ServerStats x = polling(server).serverStats();
  EXPECT_LE(x.pending, 8);
  EXPECT_LE(x.pendingBytes, 8u * (4 + st::kMaxHandshakeFrame));
  auto t0 = Clock::now();
  auto c = TcpStore::create("127.0.0.1", server->port(), false, "job", 20s, kToken);
  EXPECT_LT(Clock::now() - t0, 5s);
  c->set("k", "v");
  EXPECT_EQ(server->get("k", 1s), "v");
  EXPECT_EQ(polling(server).serverStats().authenticated, 1);
  for (int fd : fds) ::close(fd);
}

// ---------------------------------------------------------------------------------------------
// 200 bad clients against a job of 4 ranks.

// One bad client's loop: each round connects and misbehaves in one of five ways.
void badClient(int port, int kind, const std::atomic<bool>& stop, std::atomic<uint64_t>& rounds,
               std::atomic<uint64_t>& leaks) {
  std::mt19937 g(unsigned(kind * 7919 + 1));
  while (!stop.load()) {
    int fd = rawConnect(port, 200);
    if (fd < 0) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    switch (kind % 5) {
      case 0:  // connects and says nothing
        break;
      case 1: {  // a huge length
        uint32_t len = 0x7fffffff;
        (void)::send(fd, &len, 4, MSG_NOSIGNAL);
        break;
      }
      case 2: {  // garbage
        std::string junk(8192, '\0');
        for (auto& c : junk) c = char(g());
        (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
        break;
      }
      case 3: {  // a well-formed answer under the wrong token
        std::string nonce = readChallenge(fd);
        if (nonce.size() == 32) {
          std::string cn(32, 'q');
          std::string job = "flood-job";
          std::string body = st::Writer()
                                 .u8(st::AUTH)
                                 .str(st::kMagic)
                                 .str(job)
                                 .str(cn)
                                 .str(st::authProof(true, "wrong-token-wrong-token", nonce, cn, job))
                                 .data();
          (void)::send(fd, frame(body).data(), body.size() + 4, MSG_NOSIGNAL);
        }
        break;
      }
      default: {  // a frame trickled byte by byte
        uint32_t len = 3000;
        (void)::send(fd, &len, 4, MSG_NOSIGNAL);
        for (int i = 0; i < 20 && !stop.load(); ++i) {
          if (::send(fd, "t", 1, MSG_NOSIGNAL) != 1) break;
          std::this_thread::sleep_for(20ms);
        }
        break;
      }
    }
    // Whatever comes back must not carry the job's name or its keys.
    char buf[4096];
    std::string got;
    for (int i = 0; i < 50 && !stop.load(); ++i) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) break;
      if (n > 0) got.append(buf, size_t(n));
    }
    if (got.find("flood-job") != std::string::npos || got.find("rank-") != std::string::npos)
      ++leaks;
    ::close(fd);
    ++rounds;
  }
}

TEST(StoreLimits, TwoHundredBadClientsDoNotStopARealJob) {
  // The ranks are forked before the server (and its thread) starts: they learn its port through
  // a shared page that the parent fills once every rank exists (forking a process with threads
  // leaves the children with the state of threads they do not have).
  void* page = mmap(nullptr, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(page, MAP_FAILED);
  int* sharedPort = static_cast<int*>(page);
  *sharedPort = 0;
  std::shared_ptr<TcpStore> server;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0}, leaks{0};
  std::vector<std::thread> bad;
  std::atomic<int> maxPending{0};
  std::atomic<size_t> maxBytes{0};
  std::thread watch;
  Clock::time_point formedBy{};
  auto t0 = Clock::now();
  auto res = cclx::test::runRanks(
      4,
      [sharedPort](int rank, int size, std::shared_ptr<cclx::Store>) {
        std::this_thread::sleep_for(1500ms);  // the flood is in full swing by then
        int port = 0;
        while ((port = __atomic_load_n(sharedPort, __ATOMIC_ACQUIRE)) == 0)
          std::this_thread::sleep_for(10ms);
        auto start = Clock::now();
        auto base = TcpStore::create("127.0.0.1", port, false, "flood-job", 60s, kToken);
        auto store = cclx::prefixStore(base, "flood/");
        store->set("rank-" + std::to_string(rank), "here");
        cclx::Options o;
        o.timeout = 60s;
        auto comm = cclx::test::makeCpuComm(rank, size, store, o);
        std::mt19937 g(unsigned(rank + 1));
        std::vector<float> in(4096), out(4096), want(4096, 0.f);
        for (int r = 0; r < size; ++r) {
          std::mt19937 gr(unsigned(r + 1));
          for (auto& w : want) w += float(int(gr() % 1000));
        }
        for (auto& v : in) v = float(int(g() % 1000));
        comm->allReduce(in.data(), out.data(), in.size(), cclx::DataType::f32,
                        cclx::RedOpKind::SUM);
        for (size_t i = 0; i < out.size(); ++i)
          MP_CHECK(out[i] == want[i], "element %zu: got %f want %f", i, out[i], want[i]);
        double secs = std::chrono::duration<double>(Clock::now() - start).count();
        std::printf("[ flood ] rank %d connected, formed the comm and reduced in %.3f s\n", rank,
                    secs);
        MP_CHECK(secs < 30, "rank %d took %.1f s", rank, secs);
        comm->finalize();
      },
      120s,
      [&] {
        server = TcpStore::create("127.0.0.1", 0, true, "flood-job", 60s, kToken);
        const int port = server->port();
        __atomic_store_n(sharedPort, port, __ATOMIC_RELEASE);
        for (int i = 0; i < 200; ++i)
          bad.emplace_back(badClient, port, i, std::cref(stop), std::ref(rounds), std::ref(leaks));
        watch = std::thread([&] {
          while (!stop.load()) {
            st::ServerStats x = polling(server).serverStats();
            if (x.pending > maxPending.load()) maxPending.store(x.pending);
            if (x.pendingBytes > maxBytes.load()) maxBytes.store(x.pendingBytes);
            std::this_thread::sleep_for(1ms);
          }
        });
      });
  formedBy = Clock::now();
  stop.store(true);
  for (auto& t : bad) t.join();
  watch.join();
  ASSERT_TRUE(res.ok()) << res.log;
  cclx::test::echoTagged(res.log, "[ flood ]");
  auto secs = std::chrono::duration<double>(formedBy - t0).count();
  std::printf("[ flood ] 4 ranks formed and reduced in %.2f s against 200 bad clients "
              "(%llu bad rounds, at most %d pending, %zu bytes buffered for them)\n",
              secs, (unsigned long long)rounds.load(), maxPending.load(), maxBytes.load());
  EXPECT_LT(secs, 60.0);
  EXPECT_GT(rounds.load(), 1000u) << "the bad clients must have been running";
  EXPECT_EQ(size_t(maxPending.load()), defaultCap()) << "the flood must have filled the cap";
  EXPECT_EQ(leaks.load(), 0u);
  st::ServerLimits defaults;
  EXPECT_LE(size_t(maxPending.load()), defaults.maxPending);
  EXPECT_LE(maxBytes.load(), defaults.maxPending * (4 + st::kMaxHandshakeFrame));
  EXPECT_EQ(server->get("flood/rank-3", 1s), "here");
  munmap(page, sizeof(int));
}

}  // namespace
