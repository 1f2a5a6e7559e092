// TcpStore and prefixStore: operations across processes, timeouts, the job-id handshake,
// late servers and clean shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "helpers/mp.h"

using namespace std::chrono_literals;
using cclx::Error;
using cclx::TcpStore;

namespace {

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

TEST(Store, SetGetAddWaitAcrossProcesses) {
  auto res = cclx::test::runRanks(3, [](int rank, int size, std::shared_ptr<cclx::Store> store) {
    store->set("k/" + std::to_string(rank), "value-" + std::to_string(rank * 7));
    store->add("counter", rank + 1);
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back("k/" + std::to_string(r));
    store->wait(keys, 10s);
    for (int r = 0; r < size; ++r) {
      std::string v = store->get("k/" + std::to_string(r), 10s);
      MP_CHECK(v == "value-" + std::to_string(r * 7), "key %d holds '%s'", r, v.c_str());
    }
    store->set("added/" + std::to_string(rank), "1");
    std::vector<std::string> added;
    for (int r = 0; r < size; ++r) added.push_back("added/" + std::to_string(r));
    store->wait(added, 10s);
    int64_t total = store->add("counter", 0);
    MP_CHECK(total == 6, "counter is %lld", (long long)total);
    MP_CHECK(store->check("k/0"));
    MP_CHECK(!store->check("no-such-key"));
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(Store, ServerSideOperationsAndErase) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s);
  server->set("a", "1");
  EXPECT_EQ(client->get("a", 1s), "1");
  client->set("b", std::string("\0x\0", 3));
  EXPECT_EQ(server->get("b", 1s), std::string("\0x\0", 3));
  EXPECT_EQ(client->add("n", 5), 5);
  EXPECT_EQ(server->add("n", -2), 3);
  client->erase("a");
  EXPECT_FALSE(server->check("a"));
  EXPECT_EQ(codeOf([&] { client->get("a", 100ms); }), cclxTimeout);
}

TEST(Store, LargeValue) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s);
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = char((i * 131) >> 3);
  client->set("big", big);
  EXPECT_EQ(server->get("big", 1s), big);
  EXPECT_EQ(client->get("big", 1s), big);
}

TEST(Store, TimeoutsNameMissingKeys) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s);
  client->set("present", "x");
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { client->wait({"present", "absent-1", "absent-2"}, 300ms); }, &msg),
            cclxTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(msg.find("absent-1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("absent-2"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("present"), std::string::npos) << msg;
  EXPECT_EQ(codeOf([&] { client->get("lonely", 200ms); }, &msg), cclxTimeout);
  EXPECT_NE(msg.find("lonely"), std::string::npos) << msg;
}

TEST(Store, RefusesAnotherJob) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job-A", 5s);
  std::string msg;
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", server->port(), false, "job-B", 2s); }, &msg),
            cclxRemoteError);
  std::string want = "store at 127.0.0.1:" + std::to_string(server->port()) +
                     " serves another job: this process's job id is 'job-B'";
  EXPECT_NE(msg.find(want), std::string::npos) << msg;
  EXPECT_EQ(msg.find("job-A"), std::string::npos) << "the refusal names the server's job: " << msg;
  // The server keeps serving its own job.
  auto ok = TcpStore::create("127.0.0.1", server->port(), false, "job-A", 2s);
  ok->set("x", "y");
  EXPECT_EQ(server->get("x", 1s), "y");
}

TEST(Store, ClientRetriesUntilServerStarts) {
  int port;
  {
    auto probe = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
    port = probe->port();
  }
  std::shared_ptr<TcpStore> server;
  std::thread late([&] {
    std::this_thread::sleep_for(700ms);
    server = TcpStore::create("127.0.0.1", port, true, "job", 5s);
    server->set("hello", "late");
  });
  std::shared_ptr<TcpStore> client;
  cclxResult_t rc = codeOf([&] { client = TcpStore::create("127.0.0.1", port, false, "job", 20s); });
  late.join();
  ASSERT_EQ(rc, cclxSuccess);
  EXPECT_EQ(client->get("hello", 5s), "late");
}

TEST(Store, ConnectTimesOut) {
  int port;
  {
    auto probe = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
    port = probe->port();
  }
  std::string msg;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { TcpStore::create("127.0.0.1", port, false, "job", 300ms); }, &msg),
            cclxTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(msg.find(std::to_string(port)), std::string::npos) << msg;
}

TEST(Store, ServerGoneIsAnErrorNotAHang) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 2s);
  client->set("a", "b");
  server.reset();
  EXPECT_NE(codeOf([&] { client->get("c", 1s); }), cclxSuccess);
  EXPECT_NE(codeOf([&] { client->set("c", "d"); }), cclxSuccess);
}

// The process that owns the store does not take it away from a client that is still polling:
// the server's destructor waits (at most 5 s) until its clients left or went quiet.
TEST(Store, ServerLingersWhileClientsPoll) {
  auto res = cclx::test::runRanks(2, [](int rank, int, std::shared_ptr<cclx::Store> parent) {
    if (rank == 0) {
      auto server = TcpStore::create("127.0.0.1", 0, true, "linger", 5s);
      parent->set("port", std::to_string(server->port()));
      parent->get("polling", 10s);
      auto t0 = std::chrono::steady_clock::now();
      server.reset();
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - t0).count();
      MP_CHECK(ms >= 400 && ms < 4000, "the server left after %lld ms", (long long)ms);
      return;
    }
    auto client = TcpStore::create("127.0.0.1", std::stoi(parent->get("port", 10s)), false,
                                   "linger", 5s);
    // A request just before the signal: the server then counts this client busy when rank 0
    // takes it away, however long the handshake was ago on a loaded machine.
    client->check("nothing");
    parent->set("polling", "1");
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < 600ms) client->check("nothing");  // throws if lost
  }, 60s);
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(Store, ServerStartsAndStopsCleanly) {
  for (int i = 0; i < 20; ++i) {
    auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
    auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 2s);
    client->set("i", std::to_string(i));
    EXPECT_EQ(server->get("i", 1s), std::to_string(i));
  }
}

TEST(Store, PrefixIsolatesKeys) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  auto a = cclx::prefixStore(server, "a/");
  auto b = cclx::prefixStore(server, "b/");
  a->set("k", "in-a");
  b->set("k", "in-b");
  EXPECT_EQ(a->get("k", 1s), "in-a");
  EXPECT_EQ(b->get("k", 1s), "in-b");
  EXPECT_EQ(server->get("a/k", 1s), "in-a");
  EXPECT_EQ(a->add("n", 2), 2);
  EXPECT_FALSE(b->check("n"));
  a->wait({"k", "n"}, 1s);
  b->erase("k");
  EXPECT_FALSE(b->check("k"));
  EXPECT_TRUE(a->check("k"));
  EXPECT_EQ(codeOf([] { cclx::prefixStore(nullptr, "x"); }), cclxInvalidArgument);
}

TEST(Store, BadArguments) {
  EXPECT_EQ(codeOf([] { TcpStore::create("127.0.0.1", 70000, true, "job", 1s); }),
            cclxInvalidArgument);
  EXPECT_EQ(codeOf([] { TcpStore::create("127.0.0.1", 0, false, "job", 1s); }), cclxInvalidArgument);
  EXPECT_EQ(codeOf([] { TcpStore::create("127.0.0.1", 0, true, "job", 0ms); }), cclxInvalidArgument);
}

}  // namespace

// An add whose sum overflows 64 bits is refused with cclxInvalidArgument on both sides and
// changes nothing (found by fuzzing, tests/fuzz/fuzz_store.cc: signed overflow in the server).
TEST(Store, AddThatOverflowsIsRefused) {
  auto server = TcpStore::create("127.0.0.1", 0, true, "job", 5s);
  auto client = TcpStore::create("127.0.0.1", server->port(), false, "job", 5s);
  EXPECT_EQ(client->add("n", INT64_MAX - 1), INT64_MAX - 1);
  std::string msg;
  EXPECT_EQ(codeOf([&] { client->add("n", 2); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("overflows"), std::string::npos) << msg;
  EXPECT_EQ(codeOf([&] { server->add("n", 2); }, &msg), cclxInvalidArgument);
  EXPECT_NE(msg.find("'n'"), std::string::npos) << msg;
  EXPECT_EQ(client->get("n", 1s), std::to_string(INT64_MAX - 1));
  EXPECT_EQ(client->add("n", 1), INT64_MAX);
  EXPECT_EQ(client->add("m", INT64_MIN), INT64_MIN);
  EXPECT_EQ(codeOf([&] { server->add("m", -1); }), cclxInvalidArgument);
  EXPECT_EQ(server->add("m", 0), INT64_MIN);
  // The connection stays usable after a refused add.
  client->set("after", "ok");
  EXPECT_EQ(server->get("after", 1s), "ok");
}
