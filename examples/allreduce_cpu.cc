// A CPU allreduce across processes of this host: the parent starts the store, forks --nranks
// ranks, and each rank checks the result and reports the median latency.
//
//   cclx_example_allreduce_cpu [--nranks 4] [--bytes 1048576] [--iters 50]
#include <cclx/cclx.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Args {
  int nranks = 4;
  size_t bytes = 1 << 20;
  int iters = 50;
};

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (i + 1 >= argc) return false;
    char* end = nullptr;
    long long v = std::strtoll(argv[++i], &end, 10);
    if (*end != '\0' || v <= 0) return false;
    if (k == "--nranks") a.nranks = int(v);
    else if (k == "--bytes") a.bytes = size_t(v);
    else if (k == "--iters") a.iters = int(v);
    else return false;
  }
  return a.nranks >= 1 && a.nranks <= 64 && a.bytes >= 4;
}

// Rank r's element i: a small integer-valued float, so the sum is exact in f32.
float input(int r, size_t i) { return float(int((i * 7 + size_t(r) * 13) % 101) - 50); }

int runRank(int rank, const Args& a, int port) {
  using namespace std::chrono;
  auto store = cclx::TcpStore::create("127.0.0.1", port, false, "example", seconds(60));
  cclx::Options opts;
  opts.timeout = seconds(60);
  auto comm = cclx::Comm::create(cclx::DeviceSpec::cpu(), opts, store, rank, a.nranks);
  size_t n = a.bytes / sizeof(float);
  std::vector<float> send(n), recv(n);
  for (size_t i = 0; i < n; ++i) send[i] = input(rank, i);
  comm->allReduce(send.data(), recv.data(), n, cclx::DataType::f32, cclx::RedOpKind::SUM);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    double want = 0;
    for (int r = 0; r < a.nranks; ++r) want += input(r, i);
    if (double(recv[i]) != want) ++wrong;
  }
  std::vector<double> us;
  for (int it = 0; it < a.iters; ++it) {
    comm->barrier();
    auto t0 = steady_clock::now();
    comm->allReduce(send.data(), recv.data(), n, cclx::DataType::f32, cclx::RedOpKind::SUM);
    us.push_back(duration<double, std::micro>(steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  if (rank == 0)
    std::printf("allreduce f32 sum: %d ranks, %zu bytes: %s, median %.1f us over %d iterations\n",
                a.nranks, n * sizeof(float), wrong ? "WRONG" : "correct", us[us.size() / 2],
                a.iters);
  if (wrong) std::fprintf(stderr, "rank %d: %zu wrong elements\n", rank, wrong);
  comm->finalize();
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) {
    std::fprintf(stderr, "usage: %s [--nranks N] [--bytes B] [--iters I]\n", argv[0]);
    return 2;
  }
  std::shared_ptr<cclx::TcpStore> server;
  try {
    server = cclx::TcpStore::create("127.0.0.1", 0, true, "example", std::chrono::seconds(60));
  } catch (const cclx::Error& e) {
    std::fprintf(stderr, "cannot start the store: %s\n", e.what());
    return 1;
  }
  std::vector<pid_t> pids;
  for (int r = 0; r < a.nranks; ++r) {
    pid_t p = fork();
    if (p < 0) {
      std::perror("fork");
      for (pid_t q : pids) kill(q, SIGKILL);
      return 1;
    }
    if (p == 0) {
      int rc = 1;
      try {
        rc = runRank(r, a, server->port());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(p);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    if (waitpid(p, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ++failed;
  }
  if (failed) std::fprintf(stderr, "%d rank(s) failed\n", failed);
  return failed ? 1 : 0;
}
