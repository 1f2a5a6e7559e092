// C API (include/cclx/cclx.h) over the C++ API. No exception crosses this boundary.
#include <cclx/cclx.h>
#include <cclx/cclx.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "capi/check.h"

struct cclxWindow {
  std::shared_ptr<cclx::Window> win;
};

// A handle is never freed: cclxCommDestroy / Abort release its comm and leave the handle known
// (every later call on it fails naming it), so that a destroyed handle is never a use of freed
// memory, nor mistaken for a newer comm that got the same address.
struct cclxComm {
  std::shared_ptr<cclx::Comm> comm;  // null once destroyed or aborted
  std::mutex opsMu;
  std::map<int, double> premulOps;  // dynamic op id -> factor
  int nextOp = cclxNumOps;
};

namespace {

using namespace cclx;

thread_local std::string tLastError;

constexpr const char* kUidMagic = "cclx-uid2";

template <typename F>
cclxResult_t guard(F&& f) {
  try {
    tLastError.clear();
    f();
    return cclxSuccess;
  } catch (const Error& e) {
    tLastError = e.what();
    return e.code();
  } catch (const std::bad_alloc&) {
    tLastError = "out of memory";
    return cclxSystemError;
  } catch (const std::exception& e) {
    tLastError = std::string("internal error: ") + e.what();
    return cclxInternalError;
  } catch (...) {
    tLastError = "internal error: unknown exception";
    return cclxInternalError;
  }
}

// Stores started by cclxGetUniqueId, alive until the process exits, by job id.
std::mutex gServersMu;
// The pid guards against a forked child using its parent's copy (whose server thread is gone).
struct OwnedServer {
  pid_t pid;
  std::shared_ptr<TcpStore> store;
};
std::map<std::string, OwnedServer>& servers() {
  static auto* m = new std::map<std::string, OwnedServer>();
  return *m;
}

std::string localAddress() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host, nullptr, &hints, &res) != 0 || !res) return "127.0.0.1";
  char buf[INET_ADDRSTRLEN] = {0};
  auto* sa = reinterpret_cast<sockaddr_in*>(res->ai_addr);
  const char* s = ::inet_ntop(AF_INET, &sa->sin_addr, buf, sizeof(buf));
  ::freeaddrinfo(res);
  return s ? std::string(s) : std::string("127.0.0.1");
}

// 16 random bytes in hex: a unique id's store secret.
std::string randomToken() {
  std::random_device rd;
  std::string hex;
  for (int i = 0; i < 4; ++i) hex += strFormat("%08x", unsigned(rd()));
  return hex;
}

struct Uid {
  std::string host;
  int port = 0;
  std::string job;
  std::string token;  // the store's secret: the id is what the ranks share, as NCCL's
};

Uid decodeUid(const cclxUniqueId& id) {
  std::string s(id.internal, strnlen(id.internal, CCLX_UNIQUE_ID_BYTES));
  Uid u;
  char magic[16] = {0}, host[64] = {0}, job[64] = {0}, token[65] = {0};
  if (std::sscanf(s.c_str(), "%15[^|]|%63[^|]|%d|%63[^|]|%64s", magic, host, &u.port, job,
                  token) != 5 ||
      std::strcmp(magic, kUidMagic) != 0 || u.port <= 0 || u.port > 65535)
    throwError(cclxInvalidArgument, "malformed cclxUniqueId (not made by cclxGetUniqueId?)");
  u.host = host;
  u.job = job;
  u.token = token;
  return u;
}

Options optionsFrom(const cclxConfig_t* c) {
  Options o;
  // NCCL's convention: errors are returned, the process is never aborted, unless
  // CCLX_ABORT_ON_ERROR / TORCHCOMM_ABORT_ON_ERROR ask for it.
  // A malformed setting: unset here, Comm::create reports it, through the store, to every rank.
  if (const std::optional<bool> set = abortOnErrorSetting()) o.abortOnError = *set;
  else o.abortOnError = false;
  if (!c) return o;
  CAPI_ARG_CHECK(c->size == sizeof(cclxConfig_t),
                 "cclxConfig_t.size is %zu, expected %zu (use CCLX_CONFIG_INITIALIZER)", c->size,
                 sizeof(cclxConfig_t));
  CAPI_ARG_CHECK(c->timeout_ms >= 0, "timeout_ms must not be negative (got %lld)",
                 (long long)c->timeout_ms);
  if (c->timeout_ms > 0) o.timeout = std::chrono::milliseconds(c->timeout_ms);
  if (c->name) o.name = c->name;
  if (c->backend) o.backend = c->backend;
  return o;
}

DeviceSpec deviceFrom(int device) {
  CAPI_ARG_CHECK(device >= -1, "device %d is invalid (use -1 for CPU or a CUDA ordinal)", device);
  return device < 0 ? DeviceSpec::cpu() : DeviceSpec::cuda(device);
}

// Every handle this process made (live or destroyed).
std::mutex gHandlesMu;
std::unordered_set<const cclxComm*>& handles() {
  static auto* s = new std::unordered_set<const cclxComm*>();
  return *s;
}

// A handle this process made; throws for NULL and for anything else.
cclxComm& known(cclxComm_t c) {
  CAPI_ARG_CHECK(c != nullptr, "communicator is NULL");
  std::lock_guard<std::mutex> lk(gHandlesMu);
  CAPI_ARG_CHECK(handles().count(c) != 0,
                 "communicator %p was not made by cclxCommInitRank in this process",
                 static_cast<const void*>(c));
  return *c;
}

// A live handle (not destroyed or aborted).
cclxComm& handle(cclxComm_t c) {
  cclxComm& h = known(c);
  CAPI_CHECK(h.comm != nullptr, cclxInvalidUsage, "communicator %p was destroyed or aborted",
               static_cast<const void*>(c));
  return h;
}

// Destroy / abort: the comm leaves the handle (which stays known), its ops are forgotten.
std::shared_ptr<Comm> release(cclxComm& h) {
  std::lock_guard<std::mutex> lk(h.opsMu);
  h.premulOps.clear();
  return std::move(h.comm);
}

DataType dtypeOf(cclxDataType_t t) {
  CAPI_ARG_CHECK(int(t) >= 0 && int(t) < cclxNumTypes, "unknown datatype %d", int(t));
  return DataType(int(t));
}

ReduceOp opOf(cclxComm& c, cclxRedOp_t op) {
  int v = int(op);
  if (v >= 0 && v < cclxNumOps) {
    CAPI_ARG_CHECK(op != cclxPremulSum,
                   "cclxPremulSum needs a factor: create the op with cclxRedOpCreatePreMulSum");
    return ReduceOp(RedOpKind(v));
  }
  std::lock_guard<std::mutex> lk(c.opsMu);
  auto it = c.premulOps.find(v);
  CAPI_ARG_CHECK(it != c.premulOps.end(), "unknown reduction op %d on this communicator", v);
  return ReduceOp::premulSum(it->second);
}

CollOptions streamOpts(void* stream) {
  CollOptions o;
  o.stream = stream;
  return o;
}

void setOut(cclxComm_t* out, std::shared_ptr<Comm> comm) {
  auto* h = new cclxComm;
  h->comm = std::move(comm);
  {
    std::lock_guard<std::mutex> lk(gHandlesMu);
    handles().insert(h);
  }
  *out = h;
}

}  // namespace

namespace {
cclx::Window& winOf(cclxWindow_t w) {
  CAPI_ARG_CHECK(w != nullptr && w->win != nullptr, "window is NULL");
  return *w->win;
}
}  // namespace

extern "C" {

cclxResult_t cclxGetVersion(int* version) {
  return guard([&] {
    CAPI_ARG_CHECK(version != nullptr, "version is NULL");
    *version = CCLX_VERSION_CODE;
  });
}

const char* cclxGetErrorString(cclxResult_t r) {
  switch (r) {
    case cclxSuccess: return "cclxSuccess: no error";
    case cclxInvalidArgument: return "cclxInvalidArgument: invalid argument";
    case cclxInvalidUsage: return "cclxInvalidUsage: invalid usage";
    case cclxTimeout: return "cclxTimeout: a peer did not arrive within the timeout";
    case cclxSystemError: return "cclxSystemError: system call failed";
    case cclxCudaError: return "cclxCudaError: CUDA call failed";
    case cclxNcclError: return "cclxNcclError: NCCL call failed";
    case cclxRemoteError: return "cclxRemoteError: remote process error";
    case cclxInternalError: return "cclxInternalError: internal error";
    case cclxAborted: return "cclxAborted: communicator aborted";
    case cclxInProgress: return "cclxInProgress: operation in progress";
    case cclxUnsupported: return "cclxUnsupported: not supported by this build or device";
    default: return "unknown cclx result code";
  }
}

const char* cclxGetLastError(cclxComm_t) { return tLastError.c_str(); }

cclxResult_t cclxGetUniqueId(cclxUniqueId* id) {
  return guard([&] {
    CAPI_ARG_CHECK(id != nullptr, "id is NULL");
    std::string host = localAddress();
    std::string job = "uid-" + strFormat("%d-", int(::getpid()));
    {
      // A fresh random token keeps concurrent jobs on one host apart.
      static std::mutex mu;
      static uint64_t n = 0;
      std::lock_guard<std::mutex> lk(mu);
      job += strFormat("%llx-%llu", (unsigned long long)std::chrono::steady_clock::now()
                                        .time_since_epoch().count(), (unsigned long long)n++);
    }
    // The id is the secret the ranks share (as NCCL's): it carries the store's token.
    const std::string token = randomToken();
    auto server =
        TcpStore::create(host, 0, true, job, std::chrono::milliseconds(600000), token);
    std::string enc = strFormat("%s|%s|%d|%s|%s", kUidMagic, host.c_str(), server->port(),
                                job.c_str(), token.c_str());
    CAPI_CHECK(enc.size() < CCLX_UNIQUE_ID_BYTES, cclxInternalError, "unique id too long");
    {
      std::lock_guard<std::mutex> lk(gServersMu);
      servers()[job] = OwnedServer{::getpid(), server};
    }
    std::memset(id->internal, 0, CCLX_UNIQUE_ID_BYTES);
    std::memcpy(id->internal, enc.data(), enc.size());
  });
}

cclxResult_t cclxCommInitRankConfig(cclxComm_t* comm, int nranks, cclxUniqueId id, int rank,
                                    int device, const cclxConfig_t* config) {
  return guard([&] {
    CAPI_ARG_CHECK(comm != nullptr, "comm is NULL");
    CAPI_ARG_CHECK(nranks >= 1, "nranks must be at least 1 (got %d)", nranks);
    CAPI_ARG_CHECK(rank >= 0 && rank < nranks, "rank %d is outside [0, %d)", rank, nranks);
    Options o = optionsFrom(config);
    DeviceSpec dev = deviceFrom(device);
    Uid u = decodeUid(id);
    std::shared_ptr<Store> store;
    {
      std::lock_guard<std::mutex> lk(gServersMu);
      auto it = servers().find(u.job);
      if (it != servers().end() && it->second.pid == ::getpid()) store = it->second.store;
    }
    // A malformed setting is reported through the store by Comm::create, so the other ranks
    // fail with it at once: reach the store first.
    if (!store)
      store = TcpStore::create(u.host, u.port, false, u.job, creationTimeout(o), u.token);
    setOut(comm, Comm::create(dev, o, store, rank, nranks));
  });
}

cclxResult_t cclxCommInitRank(cclxComm_t* comm, int nranks, cclxUniqueId id, int rank, int device) {
  return cclxCommInitRankConfig(comm, nranks, id, rank, device, nullptr);
}

cclxResult_t cclxCommInitFromEnv(cclxComm_t* comm, int device, const cclxConfig_t* config) {
  return guard([&] {
    CAPI_ARG_CHECK(comm != nullptr, "comm is NULL");
    setOut(comm, Comm::fromEnv(deviceFrom(device), optionsFrom(config)));
  });
}

cclxResult_t cclxCommFinalize(cclxComm_t comm) {
  return guard([&] { handle(comm).comm->finalize(); });
}

cclxResult_t cclxCommDestroy(cclxComm_t comm) {
  return guard([&] {
    if (!comm) return;
    CAPI_CHECK(known(comm).comm != nullptr, cclxInvalidUsage,
                 "communicator %p was already destroyed or aborted", static_cast<void*>(comm));
    release(*comm).reset();
  });
}

cclxResult_t cclxCommAbort(cclxComm_t comm) {
  return guard([&] {
    if (!comm || !known(comm).comm) return;  // aborting a destroyed comm: nothing left to do
    std::shared_ptr<Comm> c = release(*comm);
    c->abort();
  });
}

cclxResult_t cclxCommGetAsyncError(cclxComm_t comm, cclxResult_t* asyncError) {
  return guard([&] {
    CAPI_ARG_CHECK(asyncError != nullptr, "asyncError is NULL");
    *asyncError = handle(comm).comm->asyncError();
  });
}

cclxResult_t cclxCommCount(const cclxComm_t comm, int* count) {
  return guard([&] {
    CAPI_ARG_CHECK(count != nullptr, "count is NULL");
    *count = handle(comm).comm->size();
  });
}

cclxResult_t cclxCommUserRank(const cclxComm_t comm, int* rank) {
  return guard([&] {
    CAPI_ARG_CHECK(rank != nullptr, "rank is NULL");
    *rank = handle(comm).comm->rank();
  });
}

cclxResult_t cclxCommCuDevice(const cclxComm_t comm, int* device) {
  return guard([&] {
    CAPI_ARG_CHECK(device != nullptr, "device is NULL");
    DeviceSpec d = handle(comm).comm->device();
    *device = d.type == DeviceSpec::CPU ? -1 : d.index;
  });
}

cclxResult_t cclxRedOpCreatePreMulSum(cclxRedOp_t* op, double factor, cclxComm_t comm) {
  return guard([&] {
    CAPI_ARG_CHECK(op != nullptr, "op is NULL");
    CAPI_ARG_CHECK(std::isfinite(factor), "PREMUL_SUM factor %g is not finite", factor);
    cclxComm& c = handle(comm);
    std::lock_guard<std::mutex> lk(c.opsMu);
    CAPI_CHECK(c.nextOp < (1 << 30), cclxInternalError, "too many reduction ops created");
    int id = c.nextOp++;
    c.premulOps[id] = factor;
    *op = cclxRedOp_t(id);
  });
}

cclxResult_t cclxRedOpDestroy(cclxRedOp_t op, cclxComm_t comm) {
  return guard([&] {
    cclxComm& c = handle(comm);
    std::lock_guard<std::mutex> lk(c.opsMu);
    CAPI_ARG_CHECK(c.premulOps.erase(int(op)) == 1,
                   "reduction op %d was not created on this communicator", int(op));
  });
}

cclxResult_t cclxAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           cclxDataType_t datatype, cclxRedOp_t op, cclxComm_t comm, void* stream) {
  return guard([&] {
    cclxComm& c = handle(comm);
    c.comm->allReduce(sendbuff, recvbuff, count, dtypeOf(datatype), opOf(c, op), streamOpts(stream));
  });
}

cclxResult_t cclxAllReduceRmsNorm(const void* x, const void* residual, void* residualOut,
                                  const void* weight, void* out, void* fp8Out, float* scales,
                                  const float* staticScale, size_t tokens, size_t hidden,
                                  cclxDataType_t datatype, float eps, cclxComm_t comm,
                                  void* stream) {
  return guard([&] {
    const RmsNormArgs r{x,      residual, residualOut, weight, out,
                        fp8Out, scales,   staticScale, tokens, hidden,
                        dtypeOf(datatype), eps};
    handle(comm).comm->allReduceRmsNorm(r, streamOpts(stream));
  });
}

cclxResult_t cclxReduce(const void* sendbuff, void* recvbuff, size_t count, cclxDataType_t datatype,
                        cclxRedOp_t op, int root, cclxComm_t comm, void* stream) {
  return guard([&] {
    cclxComm& c = handle(comm);
    c.comm->reduce(sendbuff, recvbuff, count, dtypeOf(datatype), opOf(c, op), root,
                   streamOpts(stream));
  });
}

cclxResult_t cclxBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           cclxDataType_t datatype, int root, cclxComm_t comm, void* stream) {
  return guard([&] {
    handle(comm).comm->broadcast(sendbuff, recvbuff, count, dtypeOf(datatype), root,
                                 streamOpts(stream));
  });
}

cclxResult_t cclxAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           cclxDataType_t datatype, cclxComm_t comm, void* stream) {
  return guard([&] {
    handle(comm).comm->allGather(sendbuff, recvbuff, sendcount, dtypeOf(datatype),
                                 streamOpts(stream));
  });
}

cclxResult_t cclxReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               cclxDataType_t datatype, cclxRedOp_t op, cclxComm_t comm,
                               void* stream) {
  return guard([&] {
    cclxComm& c = handle(comm);
    c.comm->reduceScatter(sendbuff, recvbuff, recvcount, dtypeOf(datatype), opOf(c, op),
                          streamOpts(stream));
  });
}

cclxResult_t cclxAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          cclxDataType_t datatype, cclxComm_t comm, void* stream) {
  return guard([&] {
    handle(comm).comm->allToAll(sendbuff, recvbuff, count, dtypeOf(datatype), streamOpts(stream));
  });
}

cclxResult_t cclxAllToAllV(const void* sendbuff, const size_t* sendcounts, void* recvbuff,
                           const size_t* recvcounts, cclxDataType_t datatype, cclxComm_t comm,
                           void* stream) {
  return guard([&] {
    cclxComm& c = handle(comm);
    CAPI_ARG_CHECK(sendcounts && recvcounts, "sendcounts and recvcounts must not be NULL");
    size_t n = size_t(c.comm->size());
    std::vector<size_t> sc(sendcounts, sendcounts + n), rc(recvcounts, recvcounts + n);
    c.comm->allToAllV(sendbuff, sc, recvbuff, rc, dtypeOf(datatype), streamOpts(stream));
  });
}

cclxResult_t cclxSend(const void* sendbuff, size_t count, cclxDataType_t datatype, int peer,
                      cclxComm_t comm, void* stream) {
  return guard([&] {
    handle(comm).comm->send(sendbuff, count, dtypeOf(datatype), peer, streamOpts(stream));
  });
}

cclxResult_t cclxRecv(void* recvbuff, size_t count, cclxDataType_t datatype, int peer,
                      cclxComm_t comm, void* stream) {
  return guard([&] {
    handle(comm).comm->recv(recvbuff, count, dtypeOf(datatype), peer, streamOpts(stream));
  });
}

cclxResult_t cclxBarrier(cclxComm_t comm, void* stream) {
  return guard([&] { handle(comm).comm->barrier(streamOpts(stream)); });
}

cclxResult_t cclxGroupSendRecv(const cclxP2PMessage* sends, int nsends,
                               const cclxP2PMessage* recvs, int nrecvs, cclxDataType_t datatype,
                               cclxComm_t comm, void* stream) {
  return guard([&] {
    cclxComm& c = handle(comm);
    CAPI_ARG_CHECK(nsends >= 0 && nrecvs >= 0, "negative message count (%d sends, %d receives)",
                   nsends, nrecvs);
    CAPI_ARG_CHECK(sends || nsends == 0, "sends is NULL with nsends %d", nsends);
    CAPI_ARG_CHECK(recvs || nrecvs == 0, "recvs is NULL with nrecvs %d", nrecvs);
    std::vector<P2PSend> s;
    std::vector<P2PRecv> r;
    for (int i = 0; i < nsends; ++i) s.push_back({sends[i].peer, sends[i].buff, sends[i].count});
    for (int i = 0; i < nrecvs; ++i) r.push_back({recvs[i].peer, recvs[i].buff, recvs[i].count});
    c.comm->sendRecv(s, r, dtypeOf(datatype), streamOpts(stream));
  });
}

cclxResult_t cclxWinCreate(cclxWindow_t* win, void* buff, size_t count, cclxDataType_t datatype,
                           cclxComm_t comm) {
  return guard([&] {
    CAPI_ARG_CHECK(win != nullptr, "win is NULL");
    auto w = handle(comm).comm->newWindow();
    w->registerBuffer(buff, count, dtypeOf(datatype));
    *win = new cclxWindow{std::move(w)};
  });
}

cclxResult_t cclxWinFree(cclxWindow_t win) {
  return guard([&] {
    if (!win) return;
    std::unique_ptr<cclxWindow> owned(win);
    if (owned->win && owned->win->registered()) owned->win->deregisterBuffer();
  });
}

cclxResult_t cclxPut(const void* sendbuff, size_t count, int peer, size_t targetOffset,
                     cclxWindow_t win, void* stream) {
  return guard([&] { winOf(win).put(sendbuff, count, peer, targetOffset, streamOpts(stream)); });
}

cclxResult_t cclxSignal(int peer, cclxWindow_t win, void* stream) {
  return guard([&] { winOf(win).signal(peer, streamOpts(stream)); });
}

cclxResult_t cclxWaitSignal(int peer, cclxWindow_t win, void* stream) {
  return guard([&] { winOf(win).waitSignal(peer, streamOpts(stream)); });
}

cclxResult_t cclxWinRemotePtr(cclxWindow_t win, int rank, void** ptr) {
  return guard([&] {
    CAPI_ARG_CHECK(ptr != nullptr, "ptr is NULL");
    *ptr = winOf(win).remotePtr(rank);
  });
}

cclxResult_t cclxWinGetDeviceWindow(cclxWindow_t win, int signalCount, int counterCount,
                                    int barrierCount, void** handle) {
  return guard([&] {
    CAPI_ARG_CHECK(handle != nullptr, "handle is NULL");
    *handle = winOf(win).deviceWindow(signalCount, counterCount, barrierCount);
  });
}

cclxResult_t cclxMemAllocShared(void** ptr, size_t size) {
  return guard([&] {
    CAPI_ARG_CHECK(ptr != nullptr, "ptr is NULL");
    *ptr = allocShared(size);
  });
}

cclxResult_t cclxMemFreeShared(void* ptr) {
  return guard([&] { freeShared(ptr); });
}

cclxResult_t cclxMemAlloc(void** ptr, size_t size) {
  return guard([&] {
    CAPI_ARG_CHECK(ptr != nullptr, "ptr is NULL");
    *ptr = memAlloc(size);
  });
}

cclxResult_t cclxMemFree(void* ptr) {
  return guard([&] { memFree(ptr); });
}

void* cclxTorchAlloc(ptrdiff_t size, int device, void*) {
  void* p = nullptr;
  const cclxResult_t r = guard([&] {
    CAPI_ARG_CHECK(size > 0, "allocation of %lld bytes", (long long)size);
    p = memAlloc(size_t(size), device);
  });
  if (r != cclxSuccess) logWarning(std::string("cclxTorchAlloc: ") + cclxGetLastError(nullptr));
  return r == cclxSuccess ? p : nullptr;
}

void cclxTorchFree(void* ptr, ptrdiff_t, int, void*) {
  if (guard([&] { memFree(ptr); }) != cclxSuccess)
    logWarning(std::string("cclxTorchFree: ") + cclxGetLastError(nullptr));
}

cclxResult_t cclxCommRegister(cclxComm_t comm, void* buff, size_t size) {
  return guard([&] { handle(comm).comm->registerMemory(buff, size); });
}

cclxResult_t cclxCommDeregister(cclxComm_t comm, void* buff, size_t size) {
  return guard([&] { handle(comm).comm->deregisterMemory(buff, size); });
}

}  // extern "C"
