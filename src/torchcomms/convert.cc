// Translations between torchcomms' types and cclx's (convert.h).
#include "torchcomms/convert.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <set>
#include <thread>

#include "core/settings/config.h"

namespace cclx::tc {

namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(cclxInvalidArgument, msg); }

bool nativeType(at::ScalarType s, DataType* out) {
  switch (s) {
    case at::kFloat: *out = DataType::f32; return true;
    case at::kDouble: *out = DataType::f64; return true;
    case at::kHalf: *out = DataType::f16; return true;
    case at::kBFloat16: *out = DataType::bf16; return true;
    case at::kChar: *out = DataType::i8; return true;
    case at::kByte: *out = DataType::u8; return true;
    case at::kBool: *out = DataType::u8; return true;
    case at::kInt: *out = DataType::i32; return true;
    case at::kLong: *out = DataType::i64; return true;
    case at::kUInt32: *out = DataType::u32; return true;
    case at::kUInt64: *out = DataType::u64; return true;
    case at::kFloat8_e4m3fn: *out = DataType::fp8_e4m3; return true;
    case at::kFloat8_e5m2: *out = DataType::fp8_e5m2; return true;
    default: return false;
  }
}

// Complex types reduce as pairs of their real type (SUM / AVG / PREMUL_SUM only).
bool complexType(at::ScalarType s, DataType* out) {
  switch (s) {
    case at::kComplexFloat: *out = DataType::f32; return true;
    case at::kComplexDouble: *out = DataType::f64; return true;
    case at::kComplexHalf: *out = DataType::f16; return true;
    default: return false;
  }
}

double factorOf(const tcx::PreMulSumFactorT& f) {
  if (std::holds_alternative<double>(f)) return std::get<double>(f);
  const at::Tensor& t = std::get<at::Tensor>(f);
  if (t.numel() != 1) bad("PREMUL_SUM: the factor tensor must hold one element");
  return t.to(at::kCPU).to(at::kDouble).item<double>();
}

const char* opLabel(tcx::ReduceOp::RedOpType t) {
  using T = tcx::ReduceOp::RedOpType;
  switch (t) {
    case T::SUM: return "SUM";
    case T::PRODUCT: return "PRODUCT";
    case T::MIN: return "MIN";
    case T::MAX: return "MAX";
    case T::BAND: return "BAND";
    case T::BOR: return "BOR";
    case T::BXOR: return "BXOR";
    case T::PREMUL_SUM: return "PREMUL_SUM";
    case T::AVG: return "AVG";
  }
  return "?";
}

}  // namespace

void checkTensor(const at::Tensor& t, const at::Device& dev, const char* what) {
  if (!t.defined()) bad(std::string(what) + ": the tensor is undefined");
  if (!t.is_contiguous()) bad(std::string(what) + ": the tensor must be contiguous");
  if (t.device().type() != dev.type() ||
      (dev.type() == at::kCUDA && dev.has_index() && t.device().index() != dev.index()))
    bad(std::string(what) + ": the tensor is on " + t.device().str() + ", the comm on " +
        dev.str());
}

Buf dataBuf(const at::Tensor& t, const char* what) {
  Buf b;
  b.ptr = t.numel() ? t.data_ptr() : nullptr;
  if (nativeType(t.scalar_type(), &b.dtype)) {
    b.count = size_t(t.numel());
  } else {
    b.dtype = DataType::u8;
    b.count = size_t(t.numel()) * t.element_size();
  }
  (void)what;
  return b;
}

ReduceOp reduceOp(const tcx::ReduceOp& op) {
  using T = tcx::ReduceOp::RedOpType;
  switch (op.type()) {
    case T::SUM: return RedOpKind::SUM;
    case T::PRODUCT: return RedOpKind::PRODUCT;
    case T::MIN: return RedOpKind::MIN;
    case T::MAX: return RedOpKind::MAX;
    case T::BAND: return RedOpKind::BAND;
    case T::BOR: return RedOpKind::BOR;
    case T::BXOR: return RedOpKind::BXOR;
    case T::AVG: return RedOpKind::AVG;
    case T::PREMUL_SUM:
      if (!op.factor().has_value()) bad("PREMUL_SUM without a factor");
      return ReduceOp::premulSum(factorOf(*op.factor()));
  }
  bad("unknown reduce op " + std::to_string(int(op.type())));
}

at::Tensor deviceFactor(const tcx::ReduceOp& op) {
  if (op.type() != tcx::ReduceOp::RedOpType::PREMUL_SUM || !op.factor().has_value() ||
      !std::holds_alternative<at::Tensor>(*op.factor()))
    return {};
  const at::Tensor& f = std::get<at::Tensor>(*op.factor());
  if (f.device().type() == at::kCPU) return {};
  if (f.numel() != 1) bad("PREMUL_SUM: the factor tensor must hold one element");
  return f;
}

at::Tensor premultiply(const at::Tensor& t, const at::Tensor& f, bool inPlace) {
  if (!f.defined() || t.numel() == 0) return t;
  if (f.device() != t.device())
    bad("PREMUL_SUM: the factor is on " + f.device().str() + ", the tensor on " +
        t.device().str());
  const at::Tensor g = f.reshape({}).to(t.scalar_type());
  if (!inPlace) return t.mul(g);
  at::Tensor u = t;
  u.mul_(g);
  return u;
}

Buf reduceBuf(const at::Tensor& t, const tcx::ReduceOp& op, ReduceOp* out, const char* what,
              bool premultiplied) {
  *out = premultiplied ? ReduceOp(RedOpKind::SUM) : reduceOp(op);
  Buf b;
  b.ptr = t.numel() ? t.data_ptr() : nullptr;
  b.count = size_t(t.numel());
  const at::ScalarType s = t.scalar_type();
  if (s == at::kBool) {  // as c10d: a bool SUM is a logical or, PRODUCT a logical and
    b.dtype = DataType::u8;
    if (out->kind == RedOpKind::SUM) *out = RedOpKind::MAX;
    else if (out->kind == RedOpKind::PRODUCT) *out = RedOpKind::MIN;
    else if (out->kind == RedOpKind::AVG || out->kind == RedOpKind::PREMUL_SUM)
      bad(std::string(what) + ": " + opLabel(op.type()) + " is not defined for bool");
    return b;
  }
  if (nativeType(s, &b.dtype)) return b;
  if (complexType(s, &b.dtype)) {
    const RedOpKind k = out->kind;
    if (k != RedOpKind::SUM && k != RedOpKind::AVG && k != RedOpKind::PREMUL_SUM)
      bad(std::string(what) + ": " + opLabel(op.type()) + " is not defined for complex tensors");
    b.count *= 2;
    return b;
  }
  bad(std::string(what) + ": cclx cannot reduce tensors of type " +
      std::string(c10::toString(s)));
}

std::map<std::string, std::string> cclxHints(
    const std::unordered_map<std::string, std::string>& hints) {
  std::map<std::string, std::string> out;
  if (hints.empty()) return out;
  static const std::vector<std::string> known = hintKeys();
  for (const auto& [k, v] : hints) {
    bool prefixed = false;
    std::string key = cclxKey(k, &prefixed);
    if (prefixed || std::find(known.begin(), known.end(), key) != known.end())
      out[std::move(key)] = v;
  }
  return out;
}

std::string cclxKey(const std::string& k, bool* prefixed) {
  for (const char* p : {"cclx::", "cclx."}) {
    const size_t n = std::char_traits<char>::length(p);
    if (k.compare(0, n, p) == 0) {
      if (prefixed) *prefixed = true;
      return k.substr(n);
    }
  }
  if (prefixed) *prefixed = false;
  return k;
}

namespace {

// c10d::Store errors (DistStoreError on a timeout) become cclx Errors, which cclx's rendezvous
// reports with the ranks that did not arrive.
template <typename F>
auto storeCall(const char* what, const std::string& key, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const c10::DistStoreError& e) {
    throw Error(cclxTimeout, std::string("store ") + what + " '" + key + "': " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(cclxRemoteError, std::string("store ") + what + " '" + key + "': " + e.what());
  }
}

class C10dStore : public Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::string& value) override {
    storeCall("set", key, [&] {
      s_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    });
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return storeCall("get", key, [&] {
      s_->wait({key}, timeout);
      std::vector<uint8_t> v = s_->get(key);
      return std::string(v.begin(), v.end());
    });
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return storeCall("add", key, [&] { return s_->add(key, delta); });
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    storeCall("wait", keys.empty() ? std::string() : keys[0], [&] { s_->wait(keys, timeout); });
  }
  bool check(const std::string& key) override {
    return storeCall("check", key, [&] { return s_->check({key}); });
  }
  void erase(const std::string& key) override {
    storeCall("erase", key, [&] { s_->deleteKey(key); });
  }

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

std::shared_ptr<Store> storeOver(c10::intrusive_ptr<c10d::Store> s) {
  return std::make_shared<C10dStore>(std::move(s));
}

std::pair<int, int> rankSize() {
  const LaunchEnv e = launchEnv();
  return {e.rank, e.size};
}

std::shared_ptr<Store> defaultStore(int rank, int size, std::chrono::milliseconds timeout) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<Store>> stores;  // one per address and rank
  const RendezvousConfig rc = rendezvousConfig();
  if (size == 1)  // nothing to meet: a private store on a free port (MASTER_PORT may be taken)
    return TcpStore::create("127.0.0.1", 0, true, rc.jobId, timeout, "");
  const LaunchEnv launch = launchEnv();
  const std::string& host = launch.masterAddr;
  const int port = launch.masterPort;
  const bool torchrun = launch.torchrun;
  const std::string key = host + ":" + std::to_string(port) + "/" + std::to_string(rank);
  std::lock_guard<std::mutex> lock(mu);
  auto it = stores.find(key);
  if (it != stores.end()) return it->second;
  std::shared_ptr<Store> store;
  if (torchrun) {
    // MASTER_PORT is torch's store (the agent's, or the one rank 0 serves as
    // torch.distributed does): meet through it, multi-tenant.
    const char* agent = env("TORCHELASTIC_USE_AGENT_STORE");
    c10d::TCPStoreOptions o;
    o.port = uint16_t(port);
    o.isServer = rank == 0 && !(agent && std::string(agent) == "True");
    o.numWorkers = o.isServer ? std::optional<int>(size) : std::nullopt;
    o.waitWorkers = false;
    o.multiTenant = true;
    o.timeout = timeout;
    auto ts = c10::make_intrusive<c10d::TCPStore>(host, o);
    const std::string run = env("TORCHELASTIC_RUN_ID");
    const std::string attempt =
        env("TORCHELASTIC_RESTART_COUNT") ? env("TORCHELASTIC_RESTART_COUNT") : "0";
    store = storeOver(
        c10::make_intrusive<c10d::PrefixStore>("cclx_cxx/" + run + "/" + attempt, ts));
  } else {
    store = TcpStore::create(host, port, rank == 0, rc.jobId, timeout, rc.storeToken);
  }
  stores[key] = store;
  return store;
}

}  // namespace cclx::tc
