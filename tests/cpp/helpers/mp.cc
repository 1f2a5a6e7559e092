// Multi-process test harness (see mp.h).
#include "helpers/mp.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cclx::test {

namespace {
int gRank = -1;
std::atomic<int> gRunCount{0};

// The store server's port comes from the parent through `portFd` once every rank is forked (EOF:
// the parent could not start the server).
void childMain(int rank, int n, int portFd, const std::string& jobId, int outFd,
               const std::function<void(int, int, std::shared_ptr<Store>)>& fn) {
  gRank = rank;
  if (dup2(outFd, STDOUT_FILENO) < 0 || dup2(outFd, STDERR_FILENO) < 0) _exit(3);
  close(outFd);
  setvbuf(stdout, nullptr, _IOLBF, 0);
  int port = 0;
  ssize_t got;
  while ((got = read(portFd, &port, sizeof(port))) < 0 && errno == EINTR) {
  }
  close(portFd);
  if (got != ssize_t(sizeof(port))) _exit(3);
  int code = 0;
  try {
    auto store = TcpStore::create("127.0.0.1", port, false, jobId, std::chrono::seconds(60));
    fn(rank, n, store);
  } catch (const Error& e) {
    std::fprintf(stderr, "rank %d: exception (cclx code %d): %s\n", rank, int(e.code()), e.what());
    code = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: exception: %s\n", rank, e.what());
    code = 2;
  } catch (...) {
    std::fprintf(stderr, "rank %d: unknown exception\n", rank);
    code = 2;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(code);
}

// Appends complete lines from `buf` to `log`, prefixed with the rank.
void drainLines(std::string& buf, int rank, std::string& log, bool flushAll) {
  size_t pos;
  while ((pos = buf.find('\n')) != std::string::npos) {
    log += "[rank " + std::to_string(rank) + "] " + buf.substr(0, pos + 1);
    buf.erase(0, pos + 1);
  }
  if (flushAll && !buf.empty()) {
    log += "[rank " + std::to_string(rank) + "] " + buf + "\n";
    buf.clear();
  }
}
}  // namespace

bool MpResult::ok() const {
  if (exitCodes.empty()) return false;
  for (int c : exitCodes)
    if (c != 0) return false;
  return true;
}

int mpRank() { return gRank; }

void echoTagged(const std::string& log, const char* tag) {
  size_t pos = 0;
  while (pos < log.size()) {
    size_t end = log.find('\n', pos);
    if (end == std::string::npos) end = log.size();
    size_t t = log.find(tag, pos);
    if (t != std::string::npos && t < end) std::printf("%s\n", log.substr(t, end - t).c_str());
    pos = end + 1;
  }
  std::fflush(stdout);
}

void mpFail(const char* file, int line, const char* cond, const char* fmt, ...) {
  char msg[2048] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
  }
  const char* base = std::strrchr(file, '/');
  std::fprintf(stderr, "rank %d: %s:%d: check failed: %s%s%s\n", gRank, base ? base + 1 : file,
               line, cond, fmt ? ": " : "", msg);
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(1);
}

MpResult runRanks(int n, const std::function<void(int, int, std::shared_ptr<Store>)>& fn,
                  std::chrono::seconds timeout, const std::function<void()>& afterFork) {
  MpResult res;
  if (n < 1) {
    res.log = "runRanks: n must be at least 1\n";
    return res;
  }
  std::string jobId = "mp-" + std::to_string(getpid()) + "-" + std::to_string(gRunCount++);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(size_t(n), -1);
  std::vector<int> fds(size_t(n), -1);
  std::vector<int> portFds(size_t(n), -1);
  std::vector<std::string> bufs(static_cast<size_t>(n));
  res.exitCodes.assign(size_t(n), -1);
  // The ranks are forked before the store server (and its thread) starts: a fork while another
  // thread holds a lock (the allocator's, e.g. when the server serves an earlier rank) would
  // leave that lock held forever in the child. The ranks learn the port through a pipe.
  for (int r = 0; r < n; ++r) {
    int p[2], q[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      res.log += std::string("pipe2 failed: ") + std::strerror(errno) + "\n";
      break;
    }
    if (pipe2(q, O_CLOEXEC) != 0) {
      res.log += std::string("pipe2 failed: ") + std::strerror(errno) + "\n";
      close(p[0]);
      close(p[1]);
      break;
    }
    pid_t pid = fork();
    if (pid < 0) {
      res.log += std::string("fork failed: ") + std::strerror(errno) + "\n";
      for (int f : {p[0], p[1], q[0], q[1]}) close(f);
      break;
    }
    if (pid == 0) {
      close(p[0]);
      close(q[1]);
      for (int k = 0; k < r; ++k) close(portFds[size_t(k)]);  // the earlier ranks' pipes
      childMain(r, n, q[0], jobId, p[1], fn);
    }
    close(p[1]);
    close(q[0]);
    fcntl(p[0], F_SETFL, fcntl(p[0], F_GETFL) | O_NONBLOCK);
    pids[size_t(r)] = pid;
    fds[size_t(r)] = p[0];
    portFds[size_t(r)] = q[1];
  }
  std::shared_ptr<TcpStore> server;
  try {
    server = TcpStore::create("127.0.0.1", 0, true, jobId, std::chrono::seconds(60));
  } catch (const std::exception& e) {
    res.log += std::string("[harness] the store server did not start: ") + e.what() + "\n";
  }
  const int port = server ? server->port() : 0;
  for (int& f : portFds) {
    if (f < 0) continue;
    if (server && write(f, &port, sizeof(port)) != ssize_t(sizeof(port)))
      res.log += std::string("[harness] cannot pass the port: ") + std::strerror(errno) + "\n";
    close(f);  // without a server: EOF, the rank exits with code 3
    f = -1;
  }
  if (afterFork) afterFork();

  auto deadline = std::chrono::steady_clock::now() + guard(timeout);
  int running = 0;
  for (pid_t p : pids) running += p > 0;
  std::vector<bool> done(size_t(n), false);
  for (int r = 0; r < n; ++r) done[size_t(r)] = pids[size_t(r)] <= 0;
  bool timedOut = false;
  while (running > 0 || std::any_of(fds.begin(), fds.end(), [](int f) { return f >= 0; })) {
    std::vector<pollfd> pfds;
    std::vector<int> who;
    for (int r = 0; r < n; ++r)
      if (fds[size_t(r)] >= 0) {
        pfds.push_back({fds[size_t(r)], POLLIN, 0});
        who.push_back(r);
      }
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 50);
    else usleep(20000);
    for (size_t i = 0; i < pfds.size(); ++i) {
      if (!pfds[i].revents) continue;
      int r = who[i];
      char buf[8192];
      ssize_t k = read(fds[size_t(r)], buf, sizeof(buf));
      if (k > 0) {
        bufs[size_t(r)].append(buf, size_t(k));
        drainLines(bufs[size_t(r)], r, res.log, false);
      } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
        drainLines(bufs[size_t(r)], r, res.log, true);
        close(fds[size_t(r)]);
        fds[size_t(r)] = -1;
      }
    }
    for (int r = 0; r < n; ++r) {
      if (done[size_t(r)]) continue;
      int st = 0;
      pid_t w = waitpid(pids[size_t(r)], &st, WNOHANG);
      if (w == pids[size_t(r)]) {
        done[size_t(r)] = true;
        --running;
        if (WIFEXITED(st)) res.exitCodes[size_t(r)] = WEXITSTATUS(st);
        else if (WIFSIGNALED(st) && !timedOut) {
          res.exitCodes[size_t(r)] = 128 + WTERMSIG(st);
          res.log += "[harness] rank " + std::to_string(r) + " died of signal " +
                     std::to_string(WTERMSIG(st)) + "\n";
        }
      }
    }
    if (!timedOut && running > 0 && std::chrono::steady_clock::now() > deadline) {
      timedOut = true;
      for (int r = 0; r < n; ++r)
        if (!done[size_t(r)]) {
          kill(pids[size_t(r)], SIGKILL);
          res.log += "[harness] rank " + std::to_string(r) + " killed after " +
                     std::to_string(timeout.count()) + " s\n";
        }
    }
  }
  return res;
}

std::shared_ptr<Comm> makeCpuComm(int rank, int size, std::shared_ptr<Store> store, Options opts) {
  return Comm::create(DeviceSpec::cpu(), opts, std::move(store), rank, size);
}

}  // namespace cclx::test
