// The store's authentication: SHA-256 and HMAC-SHA256 against published vectors (FIPS 180,
// RFC 4231), the handshake from both ends (a right token is admitted, a wrong or missing one is
// refused with a clear error and learns nothing of the job), the loopback-only rule without a
// token, and what a raw client sees on the wire.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include "base/error.h"
#include "store/auth.h"
#include "store/proto.h"
#include "store/store_impl.h"

using namespace std::chrono_literals;
using cclx::Error;
using cclx::TcpStore;
namespace st = cclx::store;

namespace {

const std::string kTokenA = "0123456789abcdef0123456789abcdef";
const std::string kTokenB = "fedcba9876543210fedcba9876543210";

std::string hexOf(const st::Digest& d) { return st::toHex(d.data(), d.size()); }
std::string rep(char c, size_t n) { return std::string(n, c); }

template <typename F>
cclxResult_t codeOf(F&& f, std::string* msg = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.code();
  }
  return cclxSuccess;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---------------------------------------------------------------------------------------------
// Primitives.

TEST(StoreAuth, Sha256Fips180Vectors) {
  EXPECT_EQ(hexOf(st::sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hexOf(st::sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hexOf(st::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hexOf(st::sha256(rep('a', 1000000))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The padding's edges: 55 bytes fit one block with the length, 56 do not, 64 fill one.
  EXPECT_EQ(hexOf(st::sha256(rep('a', 55))),
            "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(hexOf(st::sha256(rep('a', 56))),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(hexOf(st::sha256(rep('a', 64))),
            "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(StoreAuth, Sha256IncrementalEqualsOneShot) {
  std::mt19937 g(7);
  for (size_t len : {0u, 1u, 63u, 64u, 65u, 127u, 128u, 1000u, 4099u}) {
    std::string m(len, '\0');
    for (auto& c : m) c = char(g());
    st::Sha256 h;
    size_t pos = 0;
    while (pos < len) {
      size_t take = std::min<size_t>(len - pos, g() % 70);
      h.update(m.data() + pos, take);
      pos += take;
    }
    EXPECT_EQ(hexOf(h.finish()), hexOf(st::sha256(m))) << "length " << len;
  }
}

TEST(StoreAuth, HmacSha256Rfc4231Vectors) {
  EXPECT_EQ(hexOf(st::hmacSha256(rep('\x0b', 20), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hexOf(st::hmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hexOf(st::hmacSha256(rep('\xaa', 20), rep('\xdd', 50))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  std::string key4;
  for (int i = 1; i <= 25; ++i) key4.push_back(char(i));
  EXPECT_EQ(hexOf(st::hmacSha256(key4, rep('\xcd', 50))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  EXPECT_EQ(hexOf(st::hmacSha256(rep('\x0c', 20), "Test With Truncation")).substr(0, 32),
            "a3b6167473100ee06e0c796c2955552b");
  EXPECT_EQ(hexOf(st::hmacSha256(rep('\xaa', 131),
                                 "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  EXPECT_EQ(hexOf(st::hmacSha256(
                rep('\xaa', 131),
                "This is a test using a larger than block-size key and a larger than block-size "
                "data. The key needs to be hashed before being used by the HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(StoreAuth, ConstantTimeEqualAndRandom) {
  std::string a = "abcdefgh", b = "abcdefgh", c = "abcdefgH";
  EXPECT_TRUE(st::constantTimeEqual(a.data(), b.data(), a.size()));
  EXPECT_FALSE(st::constantTimeEqual(a.data(), c.data(), a.size()));
  EXPECT_TRUE(st::constantTimeEqual(a.data(), c.data(), 0));
  std::string r1 = st::randomBytes(32), r2 = st::randomBytes(32);
  EXPECT_EQ(r1.size(), 32u);
  EXPECT_NE(r1, r2);
  EXPECT_NE(r1, std::string(32, '\0'));
}

// ---------------------------------------------------------------------------------------------
// A raw TCP client, to see exactly what the server says and does.

int rawConnect(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

void sendRaw(int fd, const std::string& bytes) {
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
}
std::string frame(const std::string& body) {
  uint32_t n = uint32_t(body.size());
  return std::string(reinterpret_cast<const char*>(&n), 4) + body;
}
// Everything the server sends until it closes the connection (or 5 s pass).
std::string readAll(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  return out;
}
// True when the server closed the connection (recv returns 0 or a reset) within 5 s.
bool closedByServer(int fd) {
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) return errno == ECONNRESET;
  }
}

// Reads the challenge frame; returns the server nonce.
std::string readChallenge(int fd, uint8_t* flags = nullptr) {
  uint32_t n = 0;
  if (::recv(fd, &n, 4, MSG_WAITALL) != 4 || n > 4096) return {};
  std::string body(n, '\0');
  if (::recv(fd, body.data(), n, MSG_WAITALL) != ssize_t(n)) return {};
  st::Reader r(body);
  uint8_t cmd = 0, f = 0;
  std::string magic, nonce;
  if (!r.u8(cmd) || cmd != st::CHALLENGE || !r.str(magic) || !r.u8(f) || !r.str(nonce)) return {};
  if (flags) *flags = f;
  return nonce;
}

std::string authFrame(const std::string& token, const std::string& serverNonce,
                      const std::string& job) {
  std::string cn(32, 'c');
  return frame(st::Writer()
                   .u8(st::AUTH)
                   .str(st::kMagic)
                   .str(job)
                   .str(cn)
                   .str(st::authProof(true, token, serverNonce, cn, job))
                   .data());
}

// ---------------------------------------------------------------------------------------------
// The handshake.

TEST(StoreAuth, SameTokenIsAdmittedBothWays) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s, kTokenA);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s, kTokenA);
  client->set("k", "v");
  EXPECT_EQ(server->get("k", 1s), "v");
  server->set("s", "w");
  EXPECT_EQ(client->get("s", 1s), "w");
}

TEST(StoreAuth, WrongTokenIsRefusedQuicklyWithAClearError) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "secret-job-name", 5s, kTokenA);
  server->set("secret-key", "secret-value");
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", server->port(), false, "secret-job-name",
                                          20s, kTokenB); }, &msg),
            cclxRemoteError);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "a refusal ends the retries";
  EXPECT_TRUE(has(msg, "CCLX_STORE_TOKEN") && has(msg, "differs")) << msg;
  EXPECT_FALSE(has(msg, "secret-value") || has(msg, "secret-key")) << msg;
  // Still serving its own job.
  auto ok = TcpStore::create("127.0.0.1", server->port(), false, "secret-job-name", 5s, kTokenA);
  EXPECT_EQ(ok->get("secret-key", 1s), "secret-value");
}

TEST(StoreAuth, MissingTokenOnEitherSideIsAClearError) {
  auto withToken = TcpStore::create("127.0.0.1", 0, true, "job", 5s, kTokenA);
  std::string msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", withToken->port(), false, "job", 20s); },
                   &msg),
            cclxRemoteError);
  EXPECT_TRUE(has(msg, "requires a token") && has(msg, "CCLX_STORE_TOKEN")) << msg;
  auto without = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", without->port(), false, "job", 20s,
                                          kTokenA); }, &msg),
            cclxRemoteError);
  EXPECT_TRUE(has(msg, "has no token") && has(msg, "CCLX_STORE_TOKEN")) << msg;
}

TEST(StoreAuth, AnotherJobLearnsNotWhichJob) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job-A", 5s, kTokenA);
  server->set("a-key", "a-value");
  std::string msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", server->port(), false, "job-B", 5s,
                                          kTokenA); }, &msg),
            cclxRemoteError);
  EXPECT_TRUE(has(msg, "serves another job") && has(msg, "'job-B'")) << msg;
  EXPECT_FALSE(has(msg, "job-A")) << msg;
  // A job-B client holding the token gets nothing of job A: on the wire, the fixed refusal.
  int fd = rawConnect(server->port());
  ASSERT_GE(fd, 0);
  std::string nonce = readChallenge(fd);
  ASSERT_EQ(nonce.size(), 32u);
  sendRaw(fd, authFrame(kTokenA, nonce, "job-B"));
  std::string reply = readAll(fd);
  ::close(fd);
  EXPECT_FALSE(has(reply, "job-A") || has(reply, "a-key") || has(reply, "a-value"));
  EXPECT_EQ(reply, frame(st::Writer().u8(st::OTHER_JOB).str(st::kRefusal).data()));
  // A request sent behind the handshake, before its answer, closes the connection unanswered.
  fd = rawConnect(server->port());
  ASSERT_GE(fd, 0);
  nonce = readChallenge(fd);
  ASSERT_EQ(nonce.size(), 32u);
  sendRaw(fd, authFrame(kTokenA, nonce, "job-B") +
                  frame(st::Writer().u8(st::GET).str("a-key").data()));
  EXPECT_EQ(readAll(fd), "");
  ::close(fd);
}

TEST(StoreAuth, RefusalOnTheWireIsFixedAndSaysNothingOfTheJob) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "the-job-name", 5s, kTokenA);
  server->set("the-key", "the-value");
  const std::string refusal = frame(st::Writer().u8(st::REFUSED).str(st::kRefusal).data());
  // The challenge itself carries no job name.
  int fd = rawConnect(server->port());
  ASSERT_GE(fd, 0);
  uint8_t flags = 0;
  std::string nonce = readChallenge(fd, &flags);
  ASSERT_EQ(nonce.size(), 32u);
  EXPECT_EQ(flags & st::kFlagServerHasToken, st::kFlagServerHasToken);
  // Wrong token, right job name.
  sendRaw(fd, authFrame(kTokenB, nonce, "the-job-name"));
  EXPECT_EQ(readAll(fd), refusal);
  ::close(fd);
  // No token at all, the old protocol's greeting, garbage: the same reply, then closed.
  for (const std::string& body :
       {authFrame("", nonce, "the-job-name").substr(4),
        st::Writer().u8(st::AUTH).str("cclx-store-1").str("the-job-name").data(),
        std::string("\x02\x07\x00\x00\x00the-key", 12)}) {
    fd = rawConnect(server->port());
    ASSERT_GE(fd, 0);
    ASSERT_EQ(readChallenge(fd).size(), 32u);
    sendRaw(fd, frame(body));
    std::string got = readAll(fd);
    ::close(fd);
    EXPECT_EQ(got, refusal);
    EXPECT_FALSE(has(got, "the-job-name") || has(got, "the-value"));
  }
  // A replayed proof (for another connection's nonce) is refused too.
  fd = rawConnect(server->port());
  ASSERT_GE(fd, 0);
  ASSERT_EQ(readChallenge(fd).size(), 32u);
  sendRaw(fd, authFrame(kTokenA, nonce, "the-job-name"));
  EXPECT_EQ(readAll(fd), refusal);
  ::close(fd);
  // The right proof on a fresh connection works.
  fd = rawConnect(server->port());
  ASSERT_GE(fd, 0);
  nonce = readChallenge(fd);
  sendRaw(fd, authFrame(kTokenA, nonce, "the-job-name"));
  uint32_t n = 0;
  ASSERT_EQ(::recv(fd, &n, 4, MSG_WAITALL), 4);
  std::string ok(n, '\0');
  ASSERT_EQ(::recv(fd, ok.data(), n, MSG_WAITALL), ssize_t(n));
  EXPECT_EQ(uint8_t(ok[0]), st::OK);
  ::close(fd);
}

TEST(StoreAuth, ServerMustProveTheTokenBack) {
  // A fake server that sends a challenge and answers OK with a made-up proof.
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(lfd, 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread fake([&] {
    int fd = ::accept(lfd, nullptr, nullptr);
    if (fd < 0) return;
    sendRaw(fd, frame(st::Writer().u8(st::CHALLENGE).str(st::kMagic).u8(st::kFlagServerHasToken)
                          .str(std::string(32, 'n')).data()));
    uint32_t n = 0;
    if (::recv(fd, &n, 4, MSG_WAITALL) == 4 && n <= 4096) {
      std::string body(n, '\0');
      ::recv(fd, body.data(), n, MSG_WAITALL);
      sendRaw(fd, frame(st::Writer().u8(st::OK).str(std::string(32, 'p')).data()));
    }
    char c;
    (void)::recv(fd, &c, 1, 0);
    ::close(fd);
  });
  std::string msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", ntohs(a.sin_port), false, "job", 5s,
                                          kTokenA); }, &msg),
            cclxRemoteError);
  EXPECT_TRUE(has(msg, "could not prove")) << msg;
  fake.join();
  ::close(lfd);
}

TEST(StoreAuth, ShortTokenIsRefused) {
  std::string msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", 0, true, "job", 5s, "short"); }, &msg),
            cclxInvalidArgument);
  EXPECT_TRUE(has(msg, "CCLX_STORE_TOKEN") && has(msg, "at least 16")) << msg;
}

// ---------------------------------------------------------------------------------------------
// Loopback only without a token.

TEST(StoreAuth, LoopbackWithoutTokenWorksAsBefore) {
  for (const char* host : {"127.0.0.1", "localhost"}) {
    auto server = TcpStore::create(host, 0, true, "job", 5s);
    auto client = TcpStore::create(host, server->port(), false, "job", 5s);
    client->set("x", "1");
    EXPECT_EQ(server->get("x", 1s), "1") << host;
  }
}

TEST(StoreAuth, RoutableBindWithoutTokenIsRefused) {
  std::string msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("0.0.0.0", 0, true, "job", 5s); }, &msg),
            cclxInvalidArgument);
  EXPECT_TRUE(has(msg, "not a loopback address") && has(msg, "CCLX_STORE_TOKEN")) << msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("10.1.2.3", 0, true, "job", 5s); }, &msg),
            cclxInvalidArgument);
  EXPECT_TRUE(has(msg, "CCLX_STORE_TOKEN")) << msg;
  // With a token the same bind serves (every interface, loopback included).
  auto server = TcpStore::create("0.0.0.0", 0, true, "job", 5s, kTokenA);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s, kTokenA);
  client->set("y", "2");
  EXPECT_EQ(server->get("y", 1s), "2");
}

TEST(StoreAuth, ClientWithoutTokenRefusesARoutableAddressAtOnce) {
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { TcpStore::create("10.1.2.3", 29500, false, "job", 20s); }, &msg),
            cclxInvalidArgument);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_TRUE(has(msg, "not on a loopback address") && has(msg, "CCLX_STORE_TOKEN")) << msg;
}

}  // namespace
