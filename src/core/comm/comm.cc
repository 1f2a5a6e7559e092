// src/core/comm: the communicator and its calls. This file: the life cycle (creation from a store
// or the environment, split, finalize, abort); rendezvous.cc a new comm's rendezvous; comm_colls.cc
// the collectives (validation, check mode, dispatch to the backend) and comm_grouped.cc the calls
// lowered onto grouped send/recv; comm_settings.cc, comm_memory.cc settings that change after
// creation and buffer registration; window.{h,cc} one-sided windows; backend.h the contract
// between Comm and the backends (CollArgs, BootstrapInfo, Backend, CommState); types.cc names and
// sizes of data types and operators.
#include <cerrno>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "store/bootstrap.h"
#include "core/comm/comm_internal.h"
#include "base/error.h"
#include "base/log.h"
#include "core/select/select.h"
#include "core/settings/settings_check.h"
#include "core/failure/watchdog.h"

namespace cclx {

namespace {

// Comms alive in this process per TCP store (StoreFacts::id). The process that serves a store
// may leave once its last comm on it is finalized: that finalize waits for the other ranks.
std::mutex gLiveMu;
std::map<const void*, int> gLive;

void liveAdd(const void* id) {
  std::lock_guard<std::mutex> lk(gLiveMu);
  ++gLive[id];
}

// Returns how many comms on the store stay alive in this process.
int liveRelease(const void* id) {
  std::lock_guard<std::mutex> lk(gLiveMu);
  auto it = gLive.find(id);
  if (it == gLive.end()) return 0;
  int left = --it->second;
  if (left <= 0) gLive.erase(it);
  return left;
}

// Finalize's part of the store teardown: every rank records that it is done with this comm's
// keys; the process that serves the store, closing its last comm on it, waits (at most the comm's
// timeout) until the other ranks have finalized too or left, so that none loses the store under
// a request.
void releaseStore(CommState& st, bool finalizing) {
  StoreFacts f = storeFacts(*st.rootStore);
  int left = liveRelease(f.id);
  const BootstrapInfo& i = st.info;
  if (!finalizing || i.size == 1) return;
  Store& store = *i.store;
  try {
    store.set("finalized/" + std::to_string(i.rank), "1");
  } catch (const Error& e) {
    CCLX_INFO("finalize of comm '%s': store unreachable: %s", i.opts.name.c_str(), e.what());
    return;
  }
  if (!f.serving || left > 0) return;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto nextReport = start + std::chrono::seconds(10);
  for (;;) {
    std::string pending;
    for (int r = 0; r < i.size; ++r)
      if (r != i.rank && !store.check("finalized/" + std::to_string(r)))
        pending += (pending.empty() ? "" : ", ") + std::to_string(r);
    if (pending.empty() || storeFacts(store).clients == 0) return;
    auto now = Clock::now();
    long long waited = std::chrono::duration_cast<std::chrono::seconds>(now - start).count();
    if (now - start >= i.opts.timeout) {
      CCLX_WARN("finalize of comm '%s': rank(s) %s did not finalize within %lld ms; this process "
                "serves their store and leaves now", i.opts.name.c_str(), pending.c_str(),
                (long long)i.opts.timeout.count());
      return;
    }
    if (now >= nextReport) {
      long long total = std::chrono::duration_cast<std::chrono::seconds>(i.opts.timeout).count();
      CCLX_WARN("finalize of comm '%s': waiting for rank(s) %s to finalize (this process serves "
                "their store), %lld s of %lld s", i.opts.name.c_str(), pending.c_str(), waited,
                total);
      nextReport += std::chrono::seconds(10);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

void checkCreateArgs(DeviceSpec device, const Options& opts, int rank, int size) {
  CCLX_ARG_CHECK(size >= 1, "comm size must be at least 1 (got %d)", size);
  CCLX_ARG_CHECK(rank >= 0 && rank < size, "rank %d is outside [0, %d)", rank, size);
  CCLX_ARG_CHECK(!opts.name.empty(), "comm name must not be empty");
  CCLX_ARG_CHECK(opts.timeout.count() > 0,
                 "comm timeout must be positive, or kInfiniteTimeout (got %lld ms)",
                 (long long)opts.timeout.count());
  CCLX_ARG_CHECK(device.type == DeviceSpec::CPU || device.type == DeviceSpec::CUDA,
                 "unknown device type %d", int(device.type));
  if (device.type == DeviceSpec::CPU) {
    CCLX_ARG_CHECK(opts.backend != "nccl", "the nccl backend needs a CUDA device");
    CCLX_ARG_CHECK(opts.backend == "cclx", "unknown backend '%s' for a CPU comm (use \"cclx\")",
                   opts.backend.c_str());
  } else {
    CCLX_ARG_CHECK(opts.backend == "cclx" || opts.backend == "nccl",
                   "unknown backend '%s' (use \"cclx\" or \"nccl\")", opts.backend.c_str());
    CCLX_ARG_CHECK(device.index >= -1, "CUDA device index %d is invalid", device.index);
  }
  checkHints(opts.hints);
}

std::chrono::milliseconds resolveCommTimeout(const Options& opts) {
  const Config& cfg = config();
  if (cfg.timeoutMs >= 0) return std::chrono::milliseconds(cfg.timeoutMs);
  if (opts.timeout.count() != 0) return std::min(opts.timeout, kInfiniteTimeout);
  if (cfg.defaultTimeoutMs == 0) return kInfiniteTimeout;
  return std::chrono::milliseconds(cfg.defaultTimeoutMs);
}

std::chrono::milliseconds defaultTimeout() { return resolveCommTimeout(Options{}); }

std::chrono::milliseconds creationTimeout(const Options& opts) {
  try {
    return resolveCommTimeout(opts);
  } catch (const Error&) {
  }
  // A malformed setting: what the lenient reading gives (createComm reports the error).
  RendezvousConfig rc = rendezvousConfig();
  if (rc.timeoutMs > 0) return std::chrono::milliseconds(rc.timeoutMs);
  if (opts.timeout.count() > 0) return std::min(opts.timeout, kInfiniteTimeout);
  if (rc.defaultTimeoutMs == 0) return kInfiniteTimeout;
  return std::chrono::milliseconds(rc.defaultTimeoutMs);
}

void requireUsable(const CommState& st, const char* what) {
  if (st.aborted)
    CCLX_THROW(cclxInvalidUsage, "%s on comm '%s' after abort()", what, st.info.opts.name.c_str());
  if (st.finalized)
    CCLX_THROW(cclxInvalidUsage, "%s on comm '%s' after finalize()", what,
               st.info.opts.name.c_str());
}

std::shared_ptr<Comm> createComm(DeviceSpec device, const Options& optsIn,
                                 std::shared_ptr<Store> rootStore, const std::string& prefix,
                                 int rank, int size) {
  CCLX_ARG_CHECK(rootStore != nullptr, "store is null");
  std::shared_ptr<Store> commStore = prefixStore(rootStore, prefix);
  try {
    Options opts = optsIn;
    opts.timeout = resolveCommTimeout(optsIn);  // reads the config: a bad setting throws here
    checkCreateArgs(device, opts, rank, size);
    logSetRank(rank);
    auto st = std::make_unique<CommState>();
    st->rootStore = rootStore;
    st->info = bootstrap(device, opts, commStore, rank, size);
    if (device.type == DeviceSpec::CPU && size > 1) {  // GPU comms check theirs in peer_mem.cc
      const auto all = storeAllGather(
          *st->info.store, "cclx_settings",
          encodeSettings(layoutSettings(st->info.cfg, SettingsScope::kHost)), rank, size,
          opts.timeout, strFormat("settings check of comm '%s'", opts.name.c_str()));
      const std::string diff = compareSettings(all);
      CCLX_REQUIRE(diff.empty(), cclxInvalidUsage,
                   "comm '%s': the ranks disagree on settings that must be the same on every "
                   "rank: %s", opts.name.c_str(), diff.c_str());
    }
    st->backend = device.type == DeviceSpec::CPU ? makeHostBackend(st->info)
                                                 : makeCudaBackend(st->info);
    CCLX_ARG_CHECK(st->backend != nullptr, "no backend for comm '%s'", opts.name.c_str());
    st->abortOnError = opts.abortOnError.value_or(config().abortOnError);
    if (config().watchdog) watchdogAdd(st.get());
    const BootstrapInfo& i = st->info;
    CCLX_INFO("comm '%s' rank %d/%d local %d/%d hosts %d device %s%s backend %s (%s) timeout %lld ms",
              opts.name.c_str(), rank, size, i.localRank, i.localSize, i.numHosts,
              device.type == DeviceSpec::CPU ? "cpu" : "cuda:",
              device.type == DeviceSpec::CPU ? "" : std::to_string(device.index).c_str(),
              opts.backend.c_str(), st->backend->name(), (long long)opts.timeout.count());
    liveAdd(storeFacts(*rootStore).id);
    return std::make_shared<Comm>(std::move(st));
  } catch (const Error& e) {
    // Tell the other ranks, which would otherwise wait for this one until their timeout. A
    // timeout names the ranks that did not arrive: wait only for those that did.
    postFailure(*commStore, rank, size, e, creationTimeout(optsIn), e.code() != cclxTimeout);
    throw;
  }
}

std::shared_ptr<Comm> Comm::create(DeviceSpec device, const Options& opts,
                                   std::shared_ptr<Store> store, int rank, int size) {
  CCLX_ARG_CHECK(store != nullptr, "Comm::create: store is null");
  return createComm(device, opts, std::move(store), nextCommPrefix(opts.name), rank, size);
}

std::shared_ptr<Comm> Comm::fromEnv(DeviceSpec device, const Options& opts) {
  const LaunchEnv env = launchEnv();
  const int rank = env.rank, size = env.size;
  // One rank has no one to meet: a private store on a free port (MASTER_PORT may be taken), as
  // the Python package and the torchcomms backend do.
  const std::string host = size == 1 ? "127.0.0.1" : env.masterAddr;
  const int port = size == 1 ? 0 : env.masterPort;
  // A malformed setting must not stop this rank from reaching the store: createComm reports it
  // there, so that the other ranks fail with it at once.
  std::shared_ptr<TcpStore> store;
  try {
    const RendezvousConfig rc = rendezvousConfig();
    store = TcpStore::create(host, port, rank == 0, rc.jobId, creationTimeout(opts),
                             rc.storeToken);
  } catch (const Error& e) {
    const char* agent = envOrNull("TORCHELASTIC_USE_AGENT_STORE");
    if (rank == 0 && agent && std::string(agent) == "True")
      CCLX_THROW(e.code(),
                 "%s: under torchrun the agent serves MASTER_PORT; create the comm with "
                 "Comm::create and a store of your own, or through the Python package, which "
                 "meets through torchrun's store", e.what());
    throw;
  }
  auto comm = createComm(device, opts, store, nextCommPrefix(opts.name), rank, size);
  if (const char* lr = envOrNull("LOCAL_RANK")) {
    int want = envInt("LOCAL_RANK", lr, 0, 1 << 20);
    if (want != comm->localRank())
      CCLX_WARN("LOCAL_RANK=%d but rendezvous found local rank %d; using %d", want,
                comm->localRank(), comm->localRank());
  }
  if (const char* ls = envOrNull("LOCAL_WORLD_SIZE")) {
    int want = envInt("LOCAL_WORLD_SIZE", ls, 1, 1 << 20);
    if (want != comm->localSize())
      CCLX_WARN("LOCAL_WORLD_SIZE=%d but rendezvous found %d ranks on this host", want,
                comm->localSize());
  }
  return comm;
}

Comm::Comm(std::unique_ptr<CommState> st) : st_(std::move(st)) {}

Comm::~Comm() {
  if (!st_) return;
  watchdogRemove(st_.get());
  if (!st_->finalized && !st_->aborted) liveRelease(storeFacts(*st_->rootStore).id);
}

int Comm::rank() const { return st_->info.rank; }
int Comm::size() const { return st_->info.size; }
int Comm::localRank() const { return st_->info.localRank; }
int Comm::localSize() const { return st_->info.localSize; }
const std::string& Comm::name() const { return st_->info.opts.name; }
const std::string& Comm::backendName() const { return st_->info.opts.backend; }
DeviceSpec Comm::device() const { return st_->info.device; }
const Options& Comm::options() const { return st_->info.opts; }

std::shared_ptr<Comm> Comm::split(const std::vector<int>& ranks, const std::string& name) {
  requireUsable(*st_, "split");
  CCLX_ARG_CHECK(!name.empty(), "split: name must not be empty");
  CCLX_ARG_CHECK(!ranks.empty(), "split: the rank list is empty");
  std::set<int> seen;
  for (int r : ranks) {
    CCLX_ARG_CHECK(r >= 0 && r < size(), "split: rank %d is outside [0, %d)", r, size());
    CCLX_ARG_CHECK(seen.insert(r).second, "split: rank %d is listed twice", r);
  }
  int seq = st_->splitSeq++;
  std::string list;
  for (int r : ranks) list += std::to_string(r) + ",";
  std::string key = strFormat("split/%d", seq);
  auto all = storeAllGather(*st_->info.store, key, name + "|" + list, rank(), size(),
                            st_->info.opts.timeout, strFormat("split of comm '%s'", this->name().c_str()));
  for (int r = 0; r < size(); ++r)
    if (all[size_t(r)] != all[size_t(rank())])
      CCLX_THROW(cclxInvalidUsage, "split: rank %d passed (%s), rank %d passed (%s)", r,
                 all[size_t(r)].c_str(), rank(), all[size_t(rank())].c_str());
  int newRank = -1;
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == rank()) newRank = int(i);
  if (newRank < 0) return nullptr;
  Options o = st_->info.opts;
  o.name = name;
  std::string prefix = strFormat("split/%s/%d/%s/", st_->info.jobId.c_str(), seq, name.c_str());
  return createComm(device(), o, st_->rootStore, prefix, newRank, int(ranks.size()));
}

void Comm::finalize() {
  if (st_->finalized || st_->aborted) return;
  st_->finalized = true;
  watchdogRemove(st_.get());
  releaseRegistrations(*st_, true);
  st_->backend->finalize();
  releaseStore(*st_, true);
  CCLX_INFO("comm '%s' finalized", name().c_str());
}

void Comm::abort() {
  if (st_->aborted) return;
  bool live = !st_->finalized;
  st_->aborted = true;
  watchdogRemove(st_.get());
  st_->backend->abort();
  releaseRegistrations(*st_, false);
  if (live) releaseStore(*st_, false);
  CCLX_WARN("comm '%s' aborted", name().c_str());
  runAbortHooks(*st_, strFormat("comm '%s' was aborted by rank %d", name().c_str(), rank()));
}

bool Comm::isAborted() const { return st_->aborted; }
bool Comm::abortOnError() const { return st_->abortOnError; }

int Comm::addAbortHook(std::function<void(const std::string&)> hook) {
  CCLX_ARG_CHECK(bool(hook), "addAbortHook: the hook is empty");
  std::lock_guard<std::mutex> g(st_->hookMu);
  const int id = st_->nextHook++;
  st_->abortHooks.emplace(id, std::move(hook));
  return id;
}

void Comm::removeAbortHook(int handle) {
  std::lock_guard<std::mutex> g(st_->hookMu);
  st_->abortHooks.erase(handle);
}

cclxResult_t Comm::asyncError() {
  if (st_->aborted) return cclxAborted;
  return st_->backend->asyncError();
}

}  // namespace cclx
