// The process's watchdog thread and the failure decision of every comm (see watchdog.h).
#include "core/failure/watchdog.h"

#include <cclx/cclx.h>

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/comm/backend.h"
#include "base/error.h"
#include "base/log.h"

namespace cclx {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);

struct Registry {
  std::mutex mu;
  std::vector<CommState*> comms;
  bool started = false;
};

// Leaked on purpose: the detached thread may still poll while static objects are destroyed.
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

[[noreturn]] void watchdogLoop() {
  Registry& reg = registry();
  for (;;) {
    std::this_thread::sleep_for(kPollInterval);
    std::unique_lock<std::mutex> lk(reg.mu);
    for (size_t i = 0; i < reg.comms.size(); ++i) {
      CommState* st = reg.comms[i];
      if (st->failureHandled.load()) continue;
      std::pair<cclxResult_t, std::string> f;
      try {
        f = st->backend->poll();
      } catch (const std::exception& e) {
        f = {cclxInternalError, e.what()};
      }
      if (f.first == cclxSuccess) continue;
      st->failureHandled.store(true);
      noteFailure(*st, f.first, f.second, "found by the watchdog");
      if (!(st->abortOnError && fatalCode(f.first))) {
        CCLX_WARN("comm '%s' failed: %s", st->info.opts.name.c_str(), f.second.c_str());
        continue;
      }
      // Everything the abort needs is taken out of the comm under the lock; the hooks (which may
      // need other locks, e.g. a Python interpreter's) then run without it.
      Fatal fatal = prepareFatal(*st, f.first, f.second, "");
      lk.unlock();
      executeFatal(fatal);
    }
  }
}

}  // namespace

bool fatalCode(cclxResult_t code) {
  switch (code) {
    case cclxTimeout:
    case cclxRemoteError:
    case cclxNcclError:
    case cclxCudaError:
    case cclxSystemError:
    case cclxInternalError: return true;
    default: return false;
  }
}

namespace {

using Hooks = std::map<int, std::function<void(const std::string&)>>;

Hooks takeHooks(CommState& st) {
  Hooks hooks;
  std::lock_guard<std::mutex> g(st.hookMu);
  if (st.hooksRan) return hooks;
  st.hooksRan = true;
  hooks.swap(st.abortHooks);
  return hooks;
}

void callHooks(Hooks& hooks, const std::string& name, const std::string& reason) {
  for (auto& [id, hook] : hooks) {
    try {
      hook(reason);
    } catch (const std::exception& e) {
      CCLX_WARN("abort hook %d of comm '%s' threw: %s", id, name.c_str(), e.what());
    } catch (...) {
      CCLX_WARN("abort hook %d of comm '%s' threw", id, name.c_str());
    }
  }
}

}  // namespace

void runAbortHooks(CommState& st, const std::string& reason) {
  Hooks hooks = takeHooks(st);
  callHooks(hooks, st.info.opts.name, reason);
}

Fatal prepareFatal(CommState& st, cclxResult_t code, const std::string& msg,
                   const std::string& op) {
  Fatal f;
  f.name = st.info.opts.name;
  f.reason = msg;
  std::string what = op;
  if (what.empty()) {
    const int last = st.lastOp.load();
    what = last < 0 ? std::string("no collective yet")
                    : strFormat("found by the watchdog after %s #%llu (the last one enqueued)",
                                collName(CollType(last)),
                                (unsigned long long)st.opSeq.load());
  }
  f.line = strFormat(
      "cclx: rank %d of comm '%s' (%d ranks): %s: %s [%s]; timeout %lld ms; aborting the process "
      "(abort_process_on_timeout_or_error / CCLX_ABORT_ON_ERROR=0 raise an error instead)\n",
      st.info.rank, st.info.opts.name.c_str(), st.info.size, what.c_str(), msg.c_str(),
      cclxGetErrorString(code), (long long)st.info.opts.timeout.count());
  f.hooks = takeHooks(st);
  return f;
}

void executeFatal(Fatal& f) {
  // One write, so that the lines of several ranks do not interleave.
  ssize_t ignored = ::write(2, f.line.data(), f.line.size());
  (void)ignored;
  callHooks(f.hooks, f.name, f.reason);
  std::abort();
}

void commFailed(CommState& st, cclxResult_t code, const std::string& msg, const std::string& op) {
  noteFailure(st, code, msg, op);
  if (!st.abortOnError || !fatalCode(code)) return;
  Fatal f = prepareFatal(st, code, msg, op);
  executeFatal(f);
}

void watchdogAdd(CommState* st) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> g(reg.mu);
  reg.comms.push_back(st);
  if (!reg.started) {
    reg.started = true;
    std::thread(watchdogLoop).detach();
  }
}

void watchdogRemove(CommState* st) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> g(reg.mu);
  for (size_t i = 0; i < reg.comms.size(); ++i)
    if (reg.comms[i] == st) {
      reg.comms.erase(reg.comms.begin() + long(i));
      return;
    }
}

}  // namespace cclx
