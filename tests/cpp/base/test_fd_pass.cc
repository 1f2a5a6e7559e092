// File-descriptor passing (base/fd_pass.h) between forked processes, 2..4 ranks (one network
// namespace, as every rank reads it): every rank sends a memfd of its own to every other rank
// and checks that what arrives is that same file (inode, content written by the sender, and
// marks written through it that the sender reads back); a datagram without a descriptor; stray,
// repeated and malformed datagrams dropped with their descriptors closed; a receive that times
// out naming the missing rank (and closing what it had received); sends to a closed mailbox and
// to malformed addresses refused.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "helpers/mp.h"
#include "base/fd_pass.h"

using namespace std::chrono_literals;
using cclx::FdMailbox;

namespace {

constexpr size_t kFileBytes = 64 << 10;
constexpr size_t kMarkOffset = 4096;  // where receiver r writes its mark: + r * 8

uint8_t patternByte(int rank, size_t i, uint64_t nonce) {
  uint64_t x = nonce * 0x9e3779b97f4a7c15ull + uint64_t(rank) * 1000003u + i;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return uint8_t((x ^ (x >> 31)) | 1u);
}

uint64_t markOf(int receiver, int sender) {
  return 0x6d61726b00000000ull | uint64_t(receiver) << 8 | uint64_t(sender);
}

// Number of descriptors open in this process.
int openFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

bool sameFile(int a, int b) {
  struct stat sa {}, sb {};
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

int makeMemfd(const char* name, const std::string& content) {
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  if (pwrite(fd, content.data(), content.size(), 0) != ssize_t(content.size())) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string readAll(int fd, size_t n) {
  std::string s(n, '\0');
  const ssize_t k = pread(fd, s.data(), n, 0);
  s.resize(k < 0 ? 0 : size_t(k));
  return s;
}

template <typename F>
std::string expectError(cclxResult_t code, F&& f) {
  try {
    f();
  } catch (const cclx::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

void exchangeAmong(int n) {
  const uint64_t nonce = uint64_t(getpid()) << 16 | uint64_t(n);
  auto fn = [nonce](int rank, int size, std::shared_ptr<cclx::Store> store) {
    const int before = openFds();
    FdMailbox box;
    MP_CHECK(!box.address().empty(), "empty address");
    store->set("addr/" + std::to_string(rank), box.address());
    const std::string ns = cclx::networkNamespaceId();
    MP_CHECK(!ns.empty() && ns.find_first_not_of("0123456789") == std::string::npos,
             "network namespace '%s'", ns.c_str());
    store->set("ns/" + std::to_string(rank), ns);

    std::vector<char> content(kFileBytes);
    for (size_t i = 0; i < kFileBytes; ++i) content[i] = char(patternByte(rank, i, nonce));
    const int mine = memfd_create("fd-pass-test", MFD_CLOEXEC);
    MP_CHECK(mine >= 0, "memfd_create: %s", std::strerror(errno));
    MP_CHECK(pwrite(mine, content.data(), kFileBytes, 0) == ssize_t(kFileBytes), "pwrite");
    struct stat st {};
    MP_CHECK(fstat(mine, &st) == 0, "fstat");
    store->set("ino/" + std::to_string(rank), std::to_string(st.st_ino));

    std::vector<int> peers;
    for (int r = 0; r < size; ++r)
      if (r != rank) peers.push_back(r);
    for (int r : peers) {
      MP_CHECK(store->get("ns/" + std::to_string(r), 30s) == ns, "rank %d: another namespace", r);
      const std::string addr = store->get("addr/" + std::to_string(r), 30s);
      MP_CHECK(addr != box.address(), "rank %d has this rank's address", r);
      box.send(addr, mine, rank);
    }

    const std::map<int, int> got = box.receive(peers, 30s);
    MP_CHECK(got.size() == peers.size(), "received %zu descriptors, want %zu", got.size(),
             peers.size());
    for (int r : peers) {
      auto it = got.find(r);
      MP_CHECK(it != got.end() && it->second >= 0, "nothing from rank %d", r);
      const int fd = it->second;
      MP_CHECK(fd != mine, "rank %d's descriptor is this rank's own", r);
      MP_CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0, "rank %d's descriptor is not CLOEXEC", r);
      struct stat rs {};
      MP_CHECK(fstat(fd, &rs) == 0, "fstat");
      MP_CHECK(std::to_string(rs.st_ino) == store->get("ino/" + std::to_string(r), 30s),
               "rank %d's descriptor is another file (inode %llu)", r,
               static_cast<unsigned long long>(rs.st_ino));
      MP_CHECK(size_t(rs.st_size) == kFileBytes, "rank %d's file has %lld bytes", r,
               static_cast<long long>(rs.st_size));
      std::vector<char> seen(kFileBytes);
      MP_CHECK(pread(fd, seen.data(), kFileBytes, 0) == ssize_t(kFileBytes), "pread");
      // The sender wrote its pattern before sending; the marks area may already hold other
      // receivers' marks.
      for (size_t i = 0; i < kFileBytes; ++i)
        MP_CHECK((i >= kMarkOffset && i < kMarkOffset + size_t(size) * 8) ||
                     seen[i] == char(patternByte(r, i, nonce)),
                 "rank %d's file: byte %zu differs", r, i);
      const uint64_t mark = markOf(rank, r);
      MP_CHECK(pwrite(fd, &mark, 8, off_t(kMarkOffset + size_t(rank) * 8)) == 8, "pwrite mark");
      close(fd);
    }
    store->set("marked/" + std::to_string(rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("marked/" + std::to_string(r));
    store->wait(keys, 30s);
    // Every peer wrote its mark into this rank's file through the descriptor it received.
    for (int r : peers) {
      uint64_t m = 0;
      MP_CHECK(pread(mine, &m, 8, off_t(kMarkOffset + size_t(r) * 8)) == 8, "pread mark");
      MP_CHECK(m == markOf(r, rank), "rank %d's mark: %llx", r, static_cast<unsigned long long>(m));
    }
    close(mine);
    store->set("done/" + std::to_string(rank), "1");
    for (int r = 0; r < size; ++r) keys[size_t(r)] = "done/" + std::to_string(r);
    store->wait(keys, 30s);
    std::printf("fd_pass ok: %zu peers checked, %d descriptors leaked\n", peers.size(),
                openFds() - before - 1);  // the mailbox's socket is still open
  };
  auto res = cclx::test::runRanks(n, fn, std::chrono::seconds(120));
  ASSERT_TRUE(res.ok()) << res.log;
  for (int r = 0; r < n; ++r) {
    const std::string want = "[rank " + std::to_string(r) + "] fd_pass ok: " +
                             std::to_string(n - 1) + " peers checked, 0 descriptors leaked";
    EXPECT_NE(res.log.find(want), std::string::npos) << "no verdict line '" << want << "'\n"
                                                      << res.log;
  }
}

}  // namespace

TEST(FdPass, TwoRanks) { exchangeAmong(2); }
TEST(FdPass, ThreeRanks) { exchangeAmong(3); }
TEST(FdPass, FourRanks) { exchangeAmong(4); }

TEST(FdPass, AddressIsUniqueAbstractAndHex) {
  FdMailbox a, b;
  EXPECT_NE(a.address(), b.address());
  ASSERT_GE(a.address().size(), 4u);
  EXPECT_EQ(a.address().substr(0, 2), "00");  // abstract: the name starts with a NUL byte
  EXPECT_EQ(a.address().find_first_not_of("0123456789abcdef"), std::string::npos);
}

TEST(FdPass, DatagramWithoutDescriptor) {
  FdMailbox a, b;
  const int before = openFds();
  b.send(a.address(), -1, 3);
  const std::map<int, int> got = a.receive({3}, 5s);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got.at(3), -1);
  EXPECT_EQ(openFds(), before);
}

TEST(FdPass, DescriptorWithinOneProcess) {
  FdMailbox a, b;
  const int fd = makeMemfd("fd-pass-local", "local content");
  ASSERT_GE(fd, 0);
  b.send(a.address(), fd, 1);
  const std::map<int, int> got = a.receive({1}, 5s);
  ASSERT_EQ(got.size(), 1u);
  const int in = got.at(1);
  ASSERT_GE(in, 0);
  EXPECT_NE(in, fd);
  EXPECT_TRUE(sameFile(in, fd));
  EXPECT_EQ(readAll(in, 64), "local content");
  close(in);
  close(fd);
}

TEST(FdPass, StrayRepeatedAndMalformedDatagramsAreDropped) {
  FdMailbox a, b;
  const int f1 = makeMemfd("fd-pass-one", "one");
  const int f9 = makeMemfd("fd-pass-nine", "nine");
  ASSERT_GE(f1, 0);
  ASSERT_GE(f9, 0);
  const int before = openFds();
  b.send(a.address(), f9, 9);  // a tag nobody waits for
  b.send(a.address(), f1, 1);
  b.send(a.address(), f9, 1);  // tag 1 again: dropped
  {
    // A datagram of another shape, with a descriptor, from a plain socket.
    const int raw = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(raw, 0);
    sockaddr_un to{};
    to.sun_family = AF_UNIX;
    const std::string& hex = a.address();
    for (size_t i = 0; i < hex.size() / 2; ++i)
      to.sun_path[i] = char(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    char junk[5] = "junk";
    iovec iov{junk, sizeof(junk)};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr mh{};
    mh.msg_name = &to;
    mh.msg_namelen = socklen_t(offsetof(sockaddr_un, sun_path) + hex.size() / 2);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = control;
    mh.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &f9, sizeof(int));
    ASSERT_EQ(sendmsg(raw, &mh, 0), ssize_t(sizeof(junk))) << std::strerror(errno);
    close(raw);
  }
  b.send(a.address(), -1, 2);
  const std::map<int, int> got = a.receive({1, 2}, 5s);
  ASSERT_EQ(got.size(), 2u);
  ASSERT_GE(got.at(1), 0);
  EXPECT_TRUE(sameFile(got.at(1), f1));
  EXPECT_FALSE(sameFile(got.at(1), f9));
  EXPECT_EQ(got.at(2), -1);
  // Datagrams arrive in order: tag 9, the repeated tag 1 and the malformed one came before tag
  // 2, so they were all read and dropped, their descriptors closed; nothing is left queued.
  close(got.at(1));
  expectError(cclxTimeout, [&] { a.receive({7}, 200ms); });
  EXPECT_EQ(openFds(), before);
  close(f1);
  close(f9);
}

TEST(FdPass, TimeoutNamesTheMissingRanksAndClosesWhatArrived) {
  FdMailbox a, b;
  const int fd = makeMemfd("fd-pass-timeout", "x");
  ASSERT_GE(fd, 0);
  const int before = openFds();
  b.send(a.address(), fd, 1);
  b.send(a.address(), -1, 4);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = expectError(cclxTimeout, [&] { a.receive({1, 4, 5, 7}, 400ms); });
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_NE(msg.find("rank(s) 5, 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("received 2 of 4"), std::string::npos) << msg;
  EXPECT_GE(took, 390ms);
  EXPECT_LT(took, 3s);
  EXPECT_EQ(openFds(), before);  // the descriptor of rank 1 was closed
  close(fd);
}

TEST(FdPass, ZeroTimeoutAndNothingExpected) {
  FdMailbox a;
  EXPECT_TRUE(a.receive({}, 0ms).empty());
  const std::string msg = expectError(cclxTimeout, [&] { a.receive({2}, 0ms); });
  EXPECT_NE(msg.find("rank(s) 2"), std::string::npos) << msg;
}

TEST(FdPass, SendToClosedMailboxOrMalformedAddress) {
  std::string gone;
  {
    FdMailbox a;
    gone = a.address();
  }
  FdMailbox b;
  const std::string msg = expectError(cclxSystemError, [&] { b.send(gone, -1, 0); });
  EXPECT_NE(msg.find("no mailbox"), std::string::npos) << msg;
  expectError(cclxInvalidArgument, [&] { b.send("0g", -1, 0); });
  expectError(cclxInvalidArgument, [&] { b.send("abc", -1, 0); });
  expectError(cclxInvalidArgument, [&] { b.send("", -1, 0); });
}

TEST(FdPass, SeveralDescriptorsInOneDatagram) {
  FdMailbox a, b, c;
  const int f[3] = {makeMemfd("fd-pass-a", "alpha"), makeMemfd("fd-pass-b", "beta"),
                    makeMemfd("fd-pass-c", "gamma")};
  for (int fd : f) ASSERT_GE(fd, 0);
  const int before = openFds();
  b.sendMany(a.address(), {f[0], f[1], f[2]}, 1);
  c.sendMany(a.address(), {}, 2);  // the tag alone
  std::map<int, std::vector<int>> got = a.receiveMany({1, 2}, 5s);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_TRUE(got.at(2).empty());
  ASSERT_EQ(got.at(1).size(), 3u);
  const char* want[3] = {"alpha", "beta", "gamma"};
  for (int i = 0; i < 3; ++i) {  // in the order sent
    EXPECT_TRUE(sameFile(got.at(1)[size_t(i)], f[i]));
    EXPECT_EQ(readAll(got.at(1)[size_t(i)], 64), want[i]);
    close(got.at(1)[size_t(i)]);
  }
  EXPECT_EQ(openFds(), before);
  // receive() of a datagram with several keeps the first and closes the others.
  b.sendMany(a.address(), {f[2], f[0]}, 4);
  const std::map<int, int> one = a.receive({4}, 5s);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(sameFile(one.at(4), f[2]));
  close(one.at(4));
  EXPECT_EQ(openFds(), before);
  for (int fd : f) close(fd);
}

TEST(FdPass, TooManyOrNegativeDescriptorsAreRefusedBeforeSending) {
  FdMailbox a, b;
  const int fd = makeMemfd("fd-pass-many", "x");
  ASSERT_GE(fd, 0);
  const std::vector<int> many(FdMailbox::kMaxFds + 1, fd);
  std::string msg = expectError(cclxInvalidArgument, [&] { b.sendMany(a.address(), many, 1); });
  EXPECT_NE(msg.find("at most"), std::string::npos) << msg;
  expectError(cclxInvalidArgument, [&] { b.sendMany(a.address(), {fd, -1}, 1); });
  // Nothing was sent: the mailbox stays empty.
  msg = expectError(cclxTimeout, [&] { a.receiveMany({1}, 100ms); });
  EXPECT_NE(msg.find("rank(s) 1"), std::string::npos) << msg;
  close(fd);
}
