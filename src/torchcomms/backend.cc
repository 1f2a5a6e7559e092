// CclxBackend's lifetime, identity, split, settings and reconfigure (backend.h); the operations
// are in ops.cc.
#include "torchcomms/backend.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "torchcomms/device.h"
#include "torchcomms/staging.h"
#include "torchcomms/window.h"
#include "torchcomms/work.h"

namespace cclx::tc {

namespace {

std::chrono::milliseconds commTimeout(std::chrono::milliseconds t) {
  // torchcomms' CommOptions always carry a timeout (600 s unless set); 0 or less: cclx's default
  // (CCLX_TIMEOUT, TORCHCOMM_TIMEOUT_SECONDS, else 600 s).
  return t.count() > 0 ? t : std::chrono::milliseconds{0};
}

Options cclxOptions(const std::string& name, const tcx::CommOptions& o) {
  Options opts;
  opts.name = name.empty() ? "default" : name;
  opts.timeout = commTimeout(o.timeout);
  opts.abortOnError = o.abort_process_on_timeout_or_error;
  opts.hints = cclxHints(o.hints);
  return opts;
}

// cclx:<host>:<pid>:<n>, unique to this backend object.
std::string newInitHandle() {
  static std::atomic<int> seq{0};
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return "cclx:" + std::string(host) + ":" + std::to_string(getpid()) + ":" +
         std::to_string(seq++);
}

}  // namespace

CclxBackend::~CclxBackend() = default;

Comm& CclxBackend::comm(const char* what) const {
  if (!comm_)
    throw std::runtime_error(std::string("[cclx] ") + what +
                             ": the communicator is not initialized (or was finalized)");
  return *comm_;
}

void CclxBackend::adopt(std::shared_ptr<Comm> c, const at::Device& dev, const std::string& name,
                        const tcx::CommOptions& options) {
  comm_ = std::move(c);
  device_ = dev;
  name_ = name;
  options_ = options;
  options_.enable_reconfigure = false;
  initHandle_ = newInitHandle();
}

void CclxBackend::init(at::Device device, const std::string& name,
                       const tcx::CommOptions& options) {
  guarded("init", [&] {
    if (comm_) throw Error(cclxInvalidUsage, "the communicator is already initialized");
    auto [rank, size] = rankSize();
    const at::Device dev = resolveDevice(device, rank);
    name_ = name;
    device_ = dev;
    options_ = options;
    initHandle_ = newInitHandle();
    if (options.enable_reconfigure) return;  // dynamic regime: reconfigure() creates the comm
    const Options opts = cclxOptions(name, options);
    const DeviceSpec spec = dev.type() == at::kCUDA ? DeviceSpec::cuda(dev.index())
                                                    : DeviceSpec::cpu();
    std::shared_ptr<Store> store = options.store
                                       ? storeOver(options.store)
                                       : defaultStore(rank, size, opts.timeout.count() > 0
                                                                      ? opts.timeout
                                                                      : defaultTimeout());
    comm_ = Comm::create(spec, opts, std::move(store), rank, size);
  });
}

void CclxBackend::finalize() {
  guarded("finalize", [&] {
    if (!comm_) return;
    std::shared_ptr<Comm> c = std::move(comm_);
    comm_.reset();
    if (!c->isAborted()) c->finalize();
  });
}

int CclxBackend::getRank() const {
  return guarded("get_rank", [&] { return comm("get_rank").rank(); });
}

int CclxBackend::getSize() const {
  return guarded("get_size", [&] { return comm("get_size").size(); });
}

std::string_view CclxBackend::getBackendVersion() const {
  return guarded("get_backend_version", [&]() -> std::string_view {
    version_ = comm("get_backend_version").backendVersion();
    return version_;
  });
}

std::shared_ptr<tcx::TorchCommBackend> CclxBackend::split(const std::vector<int>& ranks,
                                                          const std::string& name,
                                                          const tcx::CommOptions& options) {
  return guarded("split", [&]() -> std::shared_ptr<tcx::TorchCommBackend> {
    Comm& c = comm("split");
    const int n = c.size();
    if (int(ranks.size()) > n)
      throw Error(cclxInvalidArgument, "split: " + std::to_string(ranks.size()) +
                                           " ranks listed, the comm has " + std::to_string(n));
    // torchcomms' split: every rank passes the list of its own new group (empty: in none), so
    // lists differ between groups. Gather every rank's list, check that each listed rank passed
    // the same one, and make each group by one cclx split (one list on every rank), the groups
    // ordered by their first rank.
    at::Tensor row = at::full({n + 1}, -1, at::TensorOptions().dtype(at::kLong));
    row[0] = int64_t(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) row[int64_t(i) + 1] = int64_t(ranks[i]);
    at::Tensor dev_row = row.to(device_);
    at::Tensor all = at::empty({int64_t(n) * (n + 1)},
                               at::TensorOptions().dtype(at::kLong).device(device_));
    CollOptions o;
    o.stream = currentStream(device_);
    c.allGather(dev_row.data_ptr(), all.data_ptr(), size_t(n + 1), DataType::i64, o);
    at::Tensor table = all.to(at::kCPU);
    const int64_t* t = table.data_ptr<int64_t>();
    std::vector<std::vector<int>> lists(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      const int64_t* e = t + int64_t(r) * (n + 1);
      for (int64_t i = 0; i < e[0]; ++i) lists[size_t(r)].push_back(int(e[i + 1]));
    }
    std::vector<std::vector<int>> groups;
    for (int r = 0; r < n; ++r) {
      const auto& lst = lists[size_t(r)];
      for (int m : lst)
        if (m < 0 || m >= n || lists[size_t(m)] != lst)
          throw Error(cclxInvalidArgument,
                      "split: rank " + std::to_string(r) + " and rank " + std::to_string(m) +
                          " passed different lists (or rank " + std::to_string(m) +
                          " does not exist)");
      if (!lst.empty() && std::find(groups.begin(), groups.end(), lst) == groups.end())
        groups.push_back(lst);
    }
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
    });
    std::shared_ptr<Comm> mine;
    for (const auto& g : groups) {
      auto sub = c.split(g, name.empty() ? c.name() : name);
      if (sub) mine = std::move(sub);
    }
    if (!mine) return nullptr;
    auto hints = cclxHints(options.hints);
    if (!hints.empty()) mine->setHints(hints);
    if (options.timeout != tcx::kDefaultTimeout && options.timeout.count() > 0)
      mine->setTimeout(options.timeout);
    auto b = std::make_shared<CclxBackend>();
    b->adopt(std::move(mine), device_, name, options);
    return b;
  });
}

bool CclxBackend::isAborted() const { return comm_ ? comm_->isAborted() : false; }

void CclxBackend::abort() {
  guarded("abort", [&] {
    if (comm_) comm_->abort();
  });
}

void CclxBackend::setTimeout(std::chrono::milliseconds timeout) {
  guarded("set_timeout", [&] {
    comm("set_timeout").setTimeout(timeout.count() > 0 ? timeout : kInfiniteTimeout);
    options_.timeout = timeout;
  });
}

void CclxBackend::setHints(std::unordered_map<std::string, std::string> hints) {
  guarded("set_hints", [&] {
    comm("set_hints").setHints(cclxHints(hints));
    options_.hints = std::move(hints);
  });
}

void CclxBackend::registerAbortHook(int64_t hookId, tcx::AbortHook hook) {
  guarded("register_abort_hook", [&] {
    abortHooks_.emplace(hookId, hook);
    if (comm_)
      abortHandles_[hookId] = comm_->addAbortHook([hook](const std::string&) { hook(); });
  });
}

void CclxBackend::unregisterAbortHook(int64_t hookId) {
  guarded("unregister_abort_hook", [&] {
    abortHooks_.erase(hookId);
    auto it = abortHandles_.find(hookId);
    if (it != abortHandles_.end()) {
      if (comm_) comm_->removeAbortHook(it->second);
      abortHandles_.erase(it);
    }
  });
}

void CclxBackend::tensor_register(const at::Tensor& tensor) {
  guarded("tensor_register", [&] {
    // A CPU tensor on a CUDA comm travels through device twins (staging.h): nothing to register.
    if (stagedOn(device_, tensor)) return;
    checkTensor(tensor, device_, "tensor_register");
    comm("tensor_register").registerMemory(tensor.data_ptr(), tensor.nbytes());
  });
}

void CclxBackend::tensor_deregister(const at::Tensor& tensor) {
  guarded("tensor_deregister", [&] {
    if (stagedOn(device_, tensor)) return;
    comm("tensor_deregister").deregisterMemory(tensor.data_ptr(), tensor.nbytes());
  });
}

std::shared_ptr<tcx::TorchCommWindow> CclxBackend::new_window(
    const std::optional<at::Tensor>& tensor) {
  return guarded("new_window", [&]() -> std::shared_ptr<tcx::TorchCommWindow> {
    comm("new_window");  // initialized and not finalized
    auto w = std::make_shared<CclxWindow>(comm_, device_);
    if (tensor) w->tensor_register(*tensor, true);
    return w;
  });
}

tcx::InitHandle CclxBackend::getInitHandle() const {
  return guarded("get_init_handle", [&] {
    if (initHandle_.empty()) throw Error(cclxInvalidUsage, "the comm was not initialized");
    return initHandle_;
  });
}

WorkPtr CclxBackend::reconfigure(const tcx::ReconfigureOptions& ro) {
  return guarded("reconfigure", [&]() -> WorkPtr {
    if (!options_.enable_reconfigure)  // torchcomms' wording, which its tests look for
      throw Error(cclxInvalidUsage, "reconfigure not implemented for a comm created without "
                                    "enable_reconfigure=True");
    // The new group: every handle passed; a rank's place is its handle's place in the sorted
    // list (the same on every member whatever order or container the caller used).
    std::vector<std::string> handles;
    std::visit([&](const auto& h) { handles.assign(h.begin(), h.end()); }, ro.handles);
    std::sort(handles.begin(), handles.end());
    handles.erase(std::unique(handles.begin(), handles.end()), handles.end());
    auto me = std::find(handles.begin(), handles.end(), initHandle_);
    if (me == handles.end())
      throw Error(cclxInvalidArgument, "reconfigure: this rank's handle " + initHandle_ +
                                           " is not among the " +
                                           std::to_string(handles.size()) + " handles passed");
    const int rank = int(me - handles.begin()), size = int(handles.size());
    tcx::CommOptions o = options_;
    if (ro.timeout) o.timeout = *ro.timeout;
    for (const auto& [k, v] : ro.hints) o.hints[k] = v;
    Options opts = cclxOptions(name_, o);
    opts.name = name_ + "/reconfigure/" + std::to_string(ro.uuid);
    const std::chrono::milliseconds t =
        opts.timeout.count() > 0 ? opts.timeout : defaultTimeout();
    std::shared_ptr<Store> store = options_.store ? storeOver(options_.store)
                                                  : defaultStore(rank, size, t);
    if (comm_ && !comm_->isAborted()) comm_->abort();  // the old group's work is abandoned
    comm_.reset();
    const DeviceSpec spec = device_.type() == at::kCUDA ? DeviceSpec::cuda(device_.index())
                                                        : DeviceSpec::cpu();
    comm_ = Comm::create(spec, opts, std::move(store), rank, size);
    for (const auto& [id, hook] : abortHooks_) {
      auto h = hook;
      abortHandles_[id] = comm_->addAbortHook([h](const std::string&) { h(); });
    }
    ++reconfigured_;
    return makeWork(false, nullptr, {}, t);
  });
}

}  // namespace cclx::tc
