// cclx C++ API.
//
// A Comm is a group of `size()` ranks bound to one device kind: CPU (host shared-memory transport,
// every rank on one host) or CUDA (NCCL underneath, direct-access kernels and FP8 collectives on
// top for ranks that share a host). Every rank of a Comm must call the same collectives in the
// same order with matching count / dtype / op / root (CCLX_CHECK_MODE=1 verifies this at run time).
//
// Ordering contract:
//  * CPU comms: a collective runs on the calling thread and has finished when the call returns;
//    the returned Work is already complete. One thread per Comm at a time.
//  * CUDA comms: with opts.async == false the collective is enqueued on opts.stream (the caller's
//    stream) and the call returns once it is enqueued; buffers may be reused by work later on that
//    stream. With opts.async == true it runs on the comm's internal stream after the work already on
//    opts.stream; Work::wait(stream) makes `stream` wait for it, Work::waitBlocking() blocks the host.
//    Buffers must stay alive and untouched until the Work completes.
//
// Errors are reported by throwing cclx::Error, whose code() is a cclxResult_t. Invalid arguments are
// detected before anything is enqueued or written.
#pragma once

#include <cclx/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cclx {

enum class DataType : int {
  f32 = cclxFloat32,
  f64 = cclxFloat64,
  f16 = cclxFloat16,
  bf16 = cclxBfloat16,
  i8 = cclxInt8,
  u8 = cclxUint8,
  i32 = cclxInt32,
  i64 = cclxInt64,
  u32 = cclxUint32,
  u64 = cclxUint64,
  fp8_e4m3 = cclxFloat8e4m3,
  fp8_e5m2 = cclxFloat8e5m2,
};

/// Bytes per element of `t`.
size_t dtypeSize(DataType t);
/// Short name ("f32", "bf16", ...) and its inverse (throws Error on an unknown name).
const char* dtypeName(DataType t);
DataType dtypeFromName(const std::string& name);

enum class RedOpKind : int {
  SUM = cclxSum,
  PRODUCT = cclxProd,
  MIN = cclxMin,
  MAX = cclxMax,
  AVG = cclxAvg,
  BAND = cclxBand,
  BOR = cclxBor,
  BXOR = cclxBxor,
  PREMUL_SUM = cclxPremulSum,
};

/// A reduction operator. PREMUL_SUM carries the factor every input is multiplied by.
struct ReduceOp {
  RedOpKind kind = RedOpKind::SUM;
  double factor = 1.0;
  constexpr ReduceOp() = default;
  constexpr ReduceOp(RedOpKind k) : kind(k) {}  // NOLINT: implicit on purpose
  static constexpr ReduceOp premulSum(double f) {
    ReduceOp o(RedOpKind::PREMUL_SUM);
    o.factor = f;
    return o;
  }
};
const char* opName(RedOpKind op);
RedOpKind opFromName(const std::string& name);
/// True when `op` is defined for `t` (bitwise ops: integers only; no reductions on FP8 types).
bool opSupported(RedOpKind op, DataType t);

/// Every failure surfaces as an Error carrying a cclxResult_t code and a message that says what
/// went wrong and, for timeouts, which ranks never arrived.
class Error : public std::runtime_error {
 public:
  Error(cclxResult_t code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
  cclxResult_t code() const { return code_; }

 private:
  cclxResult_t code_;
};
/// Throws Error(code, the printf-style message).
[[noreturn]] void throwError(cclxResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
/// The printf-style string.
std::string strFormat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/// Writes one warning line to the library's log (CCLX_DEBUG, CCLX_DEBUG_FILE).
void logWarning(const std::string& line);

struct DeviceSpec {
  enum Type { CPU = 0, CUDA = 1 };
  Type type = CPU;
  int index = -1;  // CUDA: device ordinal; -1 = LOCAL_RANK % device count
  static DeviceSpec cpu() { return {CPU, -1}; }
  static DeviceSpec cuda(int i = -1) { return {CUDA, i}; }
};

/// A timeout that never expires: collectives wait until every rank arrives or the comm is aborted
/// (NCCL's "no timeout"). Options::timeout = kInfiniteTimeout, or CCLX_TIMEOUT=0.
constexpr std::chrono::milliseconds kInfiniteTimeout{int64_t(1) << 42};

/// Communicator options (torchcomms' new_comm keywords).
struct Options {
  /// Collective and rendezvous timeout; a rank that never arrives produces cclxTimeout naming it.
  /// 0 = the default: CCLX_TIMEOUT, else TORCHCOMM_TIMEOUT_SECONDS (seconds; 0 = infinite), else
  /// 600 s. CCLX_TIMEOUT_MS overrides every comm's timeout.
  std::chrono::milliseconds timeout{0};
  /// On a timeout or error of this comm (a collective, or one found by the watchdog): print one
  /// line naming the comm, the op and the missing ranks, run the abort hooks, abort the process
  /// (torchcomms' abort_process_on_timeout_or_error). Off: the comm fails and its next call,
  /// Work::wait/waitBlocking/isCompleted throw. Unset: CCLX_ABORT_ON_ERROR, else
  /// TORCHCOMM_ABORT_ON_ERROR, else on.
  std::optional<bool> abortOnError;
  /// Human-readable name; also namespaces the keys this comm puts in the store.
  std::string name = "default";
  /// Backend: "cclx" (direct-access / FP8 algorithms, NCCL underneath) or "nccl" (plain NCCL).
  std::string backend = "cclx";
  /// Hints: "algo", "low_precision", "fp8_algo", "fused_algo", "put_path"; docs/SETTINGS.md
  /// lists each key's values. An unknown key or value is cclxInvalidArgument.
  std::map<std::string, std::string> hints;
};

/// The timeout of a comm whose Options::timeout is 0 (CCLX_TIMEOUT_MS, CCLX_TIMEOUT,
/// TORCHCOMM_TIMEOUT_SECONDS, else 600 s; kInfiniteTimeout for "no timeout").
std::chrono::milliseconds defaultTimeout();

/// One entry of the table of settings and hints, as data: the table that parses the CCLX_*
/// environment, checks hints and generates docs/SETTINGS.md.
struct SettingInfo {
  std::string env;                  // environment variable ("" for a hint only)
  std::string alias;                // read when `env` is unset ("" for none)
  std::string hint;                 // hint key ("" for none)
  std::vector<std::string> values;  // the values a choice or list takes (empty: other kinds)
  std::string defaultValue;         // as documented
  std::string doc;                  // one line
  bool library = true;              // read by the library (false: by the Python package, the
                                    // build or the scripts)
};
/// Every entry, in table order.
std::vector<SettingInfo> settingsTable();
/// Every hint key (Options::hints, CollOptions::hints), in table order.
std::vector<std::string> hintKeys();
/// The values hint `key` takes; an unknown key is Error(cclxInvalidArgument) naming the valid
/// keys.
std::vector<std::string> hintValues(const std::string& key);
/// The store secret of CCLX_STORE_TOKEN ("" when unset): what a TcpStore is given when its
/// caller names none.
std::string defaultStoreToken();
/// CCLX_ABORT_ON_ERROR (else TORCHCOMM_ABORT_ON_ERROR) when set: whether a comm's timeout or
/// error ends the process (Options::abortOnError); nullopt when neither is set or one is
/// malformed (creating a comm then reports it).
std::optional<bool> abortOnErrorSetting();
/// The time creating a comm with `opts` may take, connecting to its store included: the comm's
/// timeout (CCLX_TIMEOUT_MS, else opts.timeout, else defaultTimeout()), read leniently where a
/// setting is malformed so that a rank still reaches the store to report it.
std::chrono::milliseconds creationTimeout(const Options& opts);

/// Per-call options.
struct CollOptions {
  bool async = false;
  void* stream = nullptr;  // cudaStream_t for CUDA comms (nullptr = legacy default stream)
  std::chrono::milliseconds timeout{0};  // 0 = the comm's timeout
  std::map<std::string, std::string> hints;  // overrides the comm's hints for this call
  /// CUDA comms: the caller has already checked that every buffer is memory of the comm's device
  /// (torch tensors on it, as cclx's torchcomms backend checks), so the call skips its own
  /// per-buffer pointer query. A host or foreign-device buffer passed with this set is undefined
  /// behaviour. Default: every buffer is checked.
  bool buffersChecked = false;
};

/// A key-value store used for rendezvous. Thread-safe. Keys are strings, values byte strings.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// Blocks until `key` exists (or the timeout expires: cclxTimeout), then returns its value.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  /// Atomically adds `delta` to the integer stored at `key` (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Blocks until every key exists (cclxTimeout otherwise; the message lists the missing keys).
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool check(const std::string& key) = 0;
  virtual void erase(const std::string& key) = 0;
};

/// TCP store: rank 0 (isServer) listens on host:port (port 0 = pick one; see port()); clients
/// connect with retries until `timeout`. A client is admitted only when it proves (HMAC-SHA256
/// challenge-response, never sending it) that it holds the server's `token` and names the
/// server's `jobId`; the server proves the token back. A refused client gets cclxRemoteError
/// saying which setting differs. Without a token (empty) the store serves loopback only: a
/// server on an address that is not loopback, or a client to one, is refused with
/// cclxInvalidArgument naming CCLX_STORE_TOKEN. A token has at least 16 characters; every rank
/// must pass the same (Comm::fromEnv passes CCLX_STORE_TOKEN). docs/design/rendezvous.md, "Store
/// authentication", has the protocol and what it protects.
class TcpStore : public Store {
 public:
  static std::shared_ptr<TcpStore> create(const std::string& host, int port, bool isServer,
                                          const std::string& jobId,
                                          std::chrono::milliseconds timeout,
                                          const std::string& token = {});
  virtual int port() const = 0;
};

/// Store view that prefixes every key (used to give each comm its own namespace).
std::shared_ptr<Store> prefixStore(std::shared_ptr<Store> base, const std::string& prefix);

/// Handle on a collective in flight.
class Work {
 public:
  virtual ~Work() = default;
  /// Non-blocking poll. Throws Error if the operation failed or timed out.
  virtual bool isCompleted() = 0;
  /// CUDA: makes `stream` wait for the operation (no host block). CPU: same as waitBlocking().
  virtual void wait(void* stream = nullptr) = 0;
  /// Blocks the host until completion. Throws cclxTimeout after `timeout` (0 = comm timeout).
  virtual void waitBlocking(std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) = 0;
};

/// One message of a grouped send/receive (Comm::sendRecv): `count` elements to `peer`.
struct P2PSend {
  int peer = -1;
  const void* buf = nullptr;
  size_t count = 0;
};
/// One message of a grouped send/receive: `count` elements from `peer` into `buf`.
struct P2PRecv {
  int peer = -1;
  void* buf = nullptr;
  size_t count = 0;
};

/// Arguments of Comm::allReduceRmsNorm, the fused "allreduce + residual add + RMSNorm (+ FP8
/// quantization)" of tensor-parallel inference. Every [tokens, hidden] buffer is row-major (rows of
/// `hidden` elements of `dtype`: f32, bf16 or f16); device memory on CUDA comms, host memory on CPU
/// comms. Per token row, with fp32 arithmetic (docs/design/fused-rmsnorm.md gives
/// every rounding):
///   residualOut = allreduce_sum(x) + residual                   (rounded to dtype)
///   out         = residualOut * rsqrt(mean(residualOut^2) + eps) * weight
///   fp8Out      = e4m3(out / scale), scales[t] = scale           (when fp8Out is set)
/// The result is the same bits on every rank and equals the unfused sequence (allreduce, then the
/// add, the norm and the quantization) of the same inputs. `residual` must hold the same values on
/// every rank (the tensor-parallel residual stream).
struct RmsNormArgs {
  const void* x = nullptr;          // [tokens, hidden]: this rank's partial sums
  const void* residual = nullptr;   // [tokens, hidden]
  void* residualOut = nullptr;      // [tokens, hidden]: may equal residual (updated in place)
  const void* weight = nullptr;     // [hidden]
  void* out = nullptr;              // [tokens, hidden] normalized output; may equal x; may be
                                    // null when fp8Out is set
  void* fp8Out = nullptr;           // [tokens, hidden] e4m3 codes of out, or null (no FP8)
  float* scales = nullptr;          // [tokens] per-token scales (required with fp8Out)
  const float* staticScale = nullptr;  // one float (device memory on CUDA comms): a static scale
                                       // (positive, finite); null: per-token scale amax / 448
  size_t tokens = 0;
  size_t hidden = 0;                // 1 .. 2^24 - 1
  DataType dtype = DataType::bf16;
  float eps = 1e-6f;                // finite, >= 0
};

class Backend;
struct CommState;
class Window;
struct DeviceWindowHandle;  // <cclx/device_window.h>

/// Whether a peer's window memory is directly addressable from this rank (torchcomms'
/// TorchCommWinAccessType): Unified = Window::remotePtr() works (same host, peer memory);
/// Separate = only put / signal / waitSignal reach it.
enum class WinAccess : int { Unified = 0, Separate = 1 };

/// What a launcher's environment says about this process (launchEnv()).
struct LaunchEnv {
  int rank = 0;
  int size = 1;
  std::string rankVar, sizeVar;  // the variables that gave them ("" for the default 0 of 1)
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  bool torchrun = false;  // TORCHELASTIC_RUN_ID is set: torchrun's store may hold MASTER_PORT
};
/// The one rule every front end (Comm::fromEnv, cclxCommInitFromEnv, Python's new_comm, the
/// torchcomms backend) reads the environment by: the rank and world size come as a pair,
/// TORCHCOMM_RANK with TORCHCOMM_SIZE when either is set, else torchrun's RANK with WORLD_SIZE
/// when either is set, else rank 0 of 1. Half a pair is cclxInvalidArgument naming both
/// variables, also when the other pair's half would complete it (TORCHCOMM_RANK=1 WORLD_SIZE=2
/// mixes two launchers); so are a value that is not an integer, a size below 1 and a rank outside
/// [0, size). MASTER_ADDR defaults to 127.0.0.1, MASTER_PORT to 29500 (1..65535).
LaunchEnv launchEnv();

class Comm : public std::enable_shared_from_this<Comm> {
 public:
  /// Rendezvous from the environment (launchEnv(); LOCAL_RANK / LOCAL_WORLD_SIZE are checked
  /// against what rendezvous finds). Collective over all ranks.
  static std::shared_ptr<Comm> fromEnv(DeviceSpec device, const Options& opts = {});
  /// Rendezvous through a caller-provided store. Collective over all ranks.
  static std::shared_ptr<Comm> create(DeviceSpec device, const Options& opts,
                                      std::shared_ptr<Store> store, int rank, int size);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const;
  int size() const;
  int localRank() const;
  int localSize() const;
  const std::string& name() const;
  const std::string& backendName() const;
  DeviceSpec device() const;
  const Options& options() const;

  // Buffers are device pointers for CUDA comms, host pointers for CPU comms. `count` is in
  // elements. send == recv means in place. Results are identical on every rank.

  /// recv[i] = op over ranks of send[i].
  std::shared_ptr<Work> allReduce(const void* send, void* recv, size_t count, DataType dtype,
                                  ReduceOp op, const CollOptions& o = {});
  /// Like allReduce, but only `root` receives (recv may be null elsewhere).
  std::shared_ptr<Work> reduce(const void* send, void* recv, size_t count, DataType dtype,
                               ReduceOp op, int root, const CollOptions& o = {});
  /// recv = root's send on every rank.
  std::shared_ptr<Work> broadcast(const void* send, void* recv, size_t count, DataType dtype,
                                  int root, const CollOptions& o = {});
  /// recv[r*count .. (r+1)*count) = rank r's send (count elements each).
  std::shared_ptr<Work> allGather(const void* send, void* recv, size_t count, DataType dtype,
                                  const CollOptions& o = {});
  /// recvs[r] (size() buffers of count elements) = rank r's send.
  std::shared_ptr<Work> allGatherList(const void* send, const std::vector<void*>& recvs,
                                      size_t count, DataType dtype, const CollOptions& o = {});
  /// recv (count elements) = op over ranks of send[rank*count .. (rank+1)*count).
  std::shared_ptr<Work> reduceScatter(const void* send, void* recv, size_t count, DataType dtype,
                                      ReduceOp op, const CollOptions& o = {});
  /// recv = op over ranks of sends[rank] (size() buffers of count elements).
  std::shared_ptr<Work> reduceScatterList(const std::vector<const void*>& sends, void* recv,
                                          size_t count, DataType dtype, ReduceOp op,
                                          const CollOptions& o = {});
  /// Block r of send (count elements) goes to rank r, landing at block `rank` of its recv.
  std::shared_ptr<Work> allToAll(const void* send, void* recv, size_t count, DataType dtype,
                                 const CollOptions& o = {});
  /// Split sizes in elements, packed contiguously (torch's all_to_all_single with splits).
  std::shared_ptr<Work> allToAllV(const void* send, const std::vector<size_t>& sendCounts,
                                  void* recv, const std::vector<size_t>& recvCounts,
                                  DataType dtype, const CollOptions& o = {});
  /// All-to-all-v whose split sizes live where the data does (device memory on CUDA comms, host
  /// memory on CPU comms), in rows of `rowElems` elements (torchcomms' device_alltoallv_single):
  /// sendRows[p] rows of send go to rank p, packed in rank order (displacements are the exclusive
  /// prefix sums of sendRows, computed where the counts are); recvRows[p] rows from rank p land
  /// packed in rank order in recv. No host synchronization on CUDA comms (the counts are read by
  /// the device at run time, so a CUDA graph replays it with counts that change between replays).
  /// sendCapRows / recvCapRows: the rows send and recv hold; a sum of splits beyond them, or a
  /// recvRows[p] that differs from rank p's sendRows[rank], fails the operation (an error naming
  /// the ranks, recv poisoned) instead of writing out of bounds.
  std::shared_ptr<Work> allToAllVDevice(const void* send, void* recv, const int64_t* sendRows,
                                        const int64_t* recvRows, size_t rowElems, DataType dtype,
                                        size_t sendCapRows, size_t recvCapRows,
                                        const CollOptions& o = {});
  /// NCCLX's reduce_scatter_quantized: f32 send (size() * count) and recv (count); the
  /// contributions travel as bf16 rounded stochastically (a counter-based hash of `seed`, the
  /// element index and the rank: the same seed gives the same result), accumulate in f32. op SUM
  /// or AVG. `seed` is one int64 where the data lives (device memory on CUDA comms).
  std::shared_ptr<Work> reduceScatterQuantized(const float* send, float* recv, size_t count,
                                               ReduceOp op, const int64_t* seed,
                                               const CollOptions& o = {});
  std::shared_ptr<Work> send(const void* buf, size_t count, DataType dtype, int peer,
                             const CollOptions& o = {});
  std::shared_ptr<Work> recv(void* buf, size_t count, DataType dtype, int peer,
                             const CollOptions& o = {});
  std::shared_ptr<Work> barrier(const CollOptions& o = {});
  /// Fused allreduce + residual add + RMSNorm (+ FP8), see RmsNormArgs. Outputs must not overlap
  /// each other or the inputs, except out == x and residualOut == residual. Hint "fused_algo" =
  /// auto|oneshot|twoshot|unfused (CCLX_FUSED_ALGO) picks the algorithm; "algo" applies to the
  /// allreduce of the unfused sequence.
  std::shared_ptr<Work> allReduceRmsNorm(const RmsNormArgs& args, const CollOptions& o = {});

  /// Grouped point to point: every send and receive of the lists runs as one operation, which
  /// completes when all of them have. Messages between two ranks match in order (this rank's
  /// k-th message to p, counting send() calls and earlier groups, is p's k-th receive from this
  /// rank), whatever the order of the peers in either rank's lists: no listing order deadlocks.
  /// A message to this rank itself pairs with this call's receives from itself, in order, and
  /// their counts must agree. Receive buffers must not overlap one another or a send buffer,
  /// except a receive from this rank into exactly the buffer of its matching send (a no-op).
  /// Zero-count messages carry nothing; the matching message must be zero-count too.
  std::shared_ptr<Work> sendRecv(const std::vector<P2PSend>& sends,
                                 const std::vector<P2PRecv>& recvs, DataType dtype,
                                 const CollOptions& o = {});
  /// recv (count elements) = sends[rank] of `root` (sends: size() buffers, read on root only).
  std::shared_ptr<Work> scatter(const std::vector<const void*>& sends, void* recv, size_t count,
                                DataType dtype, int root, const CollOptions& o = {});
  /// On `root`: recvs[r] (size() buffers of count elements) = rank r's send. Others: recvs unused.
  std::shared_ptr<Work> gather(const void* send, const std::vector<void*>& recvs, size_t count,
                               DataType dtype, int root, const CollOptions& o = {});
  /// gather into one buffer: on `root`, recv[r*count .. (r+1)*count) = rank r's send.
  std::shared_ptr<Work> gatherSingle(const void* send, void* recv, size_t count, DataType dtype,
                                     int root, const CollOptions& o = {});
  /// recvs[r] (counts[r] elements) = rank r's send (counts[rank] elements). counts identical on
  /// every rank. In place: send == recvs[rank].
  std::shared_ptr<Work> allGatherV(const void* send, const std::vector<void*>& recvs,
                                   const std::vector<size_t>& counts, DataType dtype,
                                   const CollOptions& o = {});
  /// sends[r] (sendCounts[r] elements) goes to rank r, landing in its recvs[rank]
  /// (recvCounts[rank] there). Rank i's sendCounts[j] must equal rank j's recvCounts[i].
  std::shared_ptr<Work> allToAllList(const std::vector<const void*>& sends,
                                     const std::vector<size_t>& sendCounts,
                                     const std::vector<void*>& recvs,
                                     const std::vector<size_t>& recvCounts, DataType dtype,
                                     const CollOptions& o = {});
  /// recv (counts[rank] elements) = op over ranks of their sends[rank] (sends[r] holds counts[r]
  /// elements; counts identical on every rank). In place: recv == sends[rank].
  std::shared_ptr<Work> reduceScatterV(const std::vector<const void*>& sends,
                                       const std::vector<size_t>& counts, void* recv,
                                       DataType dtype, ReduceOp op, const CollOptions& o = {});

  /// The comm's default timeout for later calls (per-call timeouts still win). Must be > 0.
  void setTimeout(std::chrono::milliseconds timeout);
  /// Replaces the comm's hints (per-call hints still win). Every key and value is checked first:
  /// an unknown key or a value not listed throws cclxInvalidArgument and changes nothing.
  void setHints(const std::map<std::string, std::string>& hints);
  /// Sets the given hints and keeps the comm's others (NCCLX's set_config), checked as setHints.
  void updateHints(const std::map<std::string, std::string>& hints);
  /// "cclx <version>", plus the NCCL version a CUDA comm runs on ("... NCCL 2.28.9").
  std::string backendVersion() const;
  /// This comm's state for hang debugging (NCCLX's comm_dump): flat key -> value text: "name",
  /// "rank", "size", "local_rank", "hosts", "backend" ("cclx" / "nccl"), "transport" (the backend
  /// that runs it), "device", "timeout_ms", "ops_issued", "ops_completed", "ops_failed",
  /// "in_flight" (issued and not known complete: issued - completed - failed), "in_flight_ops"
  /// (the oldest 16 of them, "<op> #<seq>"), "last_op", "last_completed_op", "failure" ("none"
  /// when healthy, else the code, the operation and the message of what broke the comm),
  /// "failure_ranks" (the ranks that failure names, "1,3"), "aborted", "finalized", and
  /// "algo.<collective>" for the algorithm the last call of each collective ran. Counts cover the
  /// collective and point-to-point calls (not window operations). Local; never blocks on peers;
  /// works after finalize() and abort() (their pending operations then stay listed).
  std::map<std::string, std::string> dump() const;

  /// Collective over all ranks of this comm: those listed in `ranks` get a new comm (ranks
  /// renumbered in list order); the others get nullptr.
  std::shared_ptr<Comm> split(const std::vector<int>& ranks, const std::string& name);
  /// Orderly shutdown after outstanding work completes. Later calls raise cclxInvalidUsage.
  void finalize();
  /// Abandons outstanding work; peers waiting on this rank will time out. Later calls raise.
  void abort();
  /// First asynchronous error seen (cclxSuccess if none, cclxInProgress if work is running).
  cclxResult_t asyncError();
  /// True after abort() on this rank.
  bool isAborted() const;
  /// Whether a timeout or error ends the process (Options::abortOnError, resolved).
  bool abortOnError() const;

  /// Abort hooks: called (once, in registration order) with the reason when this comm aborts:
  /// abort(), or a timeout / error with abortOnError, just before the process aborts. Hooks run on
  /// the thread that found the failure (the caller's or the watchdog's) and must not call into
  /// the comm. Returns a handle for removeAbortHook.
  int addAbortHook(std::function<void(const std::string& reason)> hook);
  void removeAbortHook(int handle);

  /// Local (torchcomms' tensor_register): registers [ptr, ptr + bytes) with the transport so
  /// later operations on it can skip staging copies. CUDA comms with an NCCL communicator:
  /// ncclCommRegister (zero-copy for memory from memAlloc(), see NCCL's user buffer
  /// registration); other comms check and track the buffer only. The memory must belong to the
  /// comm's device (CUDA) or be host memory (CPU). A second registration starting at the same
  /// address is cclxInvalidArgument. Deregister before freeing the memory; finalize() releases
  /// what is still registered.
  void registerMemory(void* ptr, size_t bytes);
  /// Releases a registerMemory() of exactly (ptr, bytes); anything else is cclxInvalidArgument.
  void deregisterMemory(void* ptr, size_t bytes);
  /// Buffers registered now.
  size_t registeredCount() const;

  /// Collective over all ranks: a one-sided window (torchcomms' new_window), with nothing
  /// registered yet. See Window.
  std::shared_ptr<Window> newWindow();

  /// Which algorithm the dispatcher would pick for an allreduce of these arguments
  /// ("flat", "lamport", "tree", "fp8", "nccl", "shm-flat", ...). For tools and tests.
  std::string selectAllReduceAlgo(size_t count, DataType dtype, ReduceOp op,
                                  const CollOptions& o = {});
  /// What allReduceRmsNorm would run for these arguments (buffers are not looked at):
  /// "fused_oneshot", "fused_twoshot", "unfused(<allreduce algorithm>)" ("shm-fused-oneshot",
  /// "shm-fused-twoshot", "unfused(shm-...)" on CPU comms).
  std::string selectAllReduceRmsNormAlgo(const RmsNormArgs& args, const CollOptions& o = {});

  // Internal.
  explicit Comm(std::unique_ptr<CommState> st);

 private:
  friend struct CommAccess;
  std::unique_ptr<CommState> st_;
};

/// One-sided communication over memory every rank registers (torchcomms' TorchCommWindow).
///
/// Every rank registers a buffer of the same element count and type (registerBuffer, collective).
/// put() copies local data into a peer's registered buffer at an element offset without the peer
/// taking part; signal(dst) adds one to dst's counter for this rank once every earlier put from
/// this rank to dst is visible in dst's buffer; waitSignal(src) waits until src's counter has
/// advanced past what earlier waits on src consumed (one signal per wait). Nothing else orders
/// puts: read what a peer put only after the waitSignal that consumed its signal.
///
/// CUDA comms: all three are stream-ordered like collectives (CollOptions::stream / async, the
/// returned Work), capturable in CUDA graphs (the counters and the expected values live on the
/// device), and watched by the comm's timeout (a signal that never comes fails the wait naming
/// the missing rank; the registered buffer is then poisoned). Ranks of one host reach each other
/// through CUDA IPC (copy engine or SM stores); across hosts through NCCL's one-sided API (NCCL
/// 2.29 or later). CPU comms: the registered memory must be shared memory peers can map (a
/// MAP_SHARED mapping of a file that still has a name, e.g. from allocShared() or a torch storage
/// shared with the file-system strategy); the calls finish before returning.
///
/// Operations on a window are issued by one thread at a time. Destroying a Window releases this
/// rank's mappings without waiting for peers: call deregisterBuffer() on every rank first.
class Window {
 public:
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  /// Collective: makes `count` elements of `dtype` at `ptr` (device memory of the comm's device,
  /// or shared host memory on CPU comms) this rank's window. Every rank must pass the same count
  /// and dtype (cclxInvalidArgument on every rank, naming the ranks that differ, with nothing
  /// registered). The memory must stay alive until deregisterBuffer().
  void registerBuffer(void* ptr, size_t count, DataType dtype);
  /// Collective: waits until this rank's window operations are complete and every rank is done
  /// with the window, then unmaps the peers' buffers. Pointers from remotePtr() become invalid.
  void deregisterBuffer();
  bool registered() const;
  void* data() const;
  size_t count() const;
  DataType dtype() const;

  /// Copies `count` elements (the window's dtype) from `src` into rank `dst`'s buffer starting at
  /// element `targetOffset`. targetOffset + count beyond the window: cclxInvalidArgument, nothing
  /// written. `src` must not overlap the destination range.
  std::shared_ptr<Work> put(const void* src, size_t count, int dst, size_t targetOffset,
                            const CollOptions& o = {});
  /// Adds one to rank dst's counter for this rank, after every earlier put to dst is visible.
  std::shared_ptr<Work> signal(int dst, const CollOptions& o = {});
  /// Waits for the next signal from rank src (stream-ordered on CUDA comms).
  std::shared_ptr<Work> waitSignal(int src, const CollOptions& o = {});
  /// Rank `rank`'s registered buffer as this process addresses it (this rank: data()); throws
  /// cclxUnsupported when it is not directly accessible (access() == Separate).
  void* remotePtr(int rank) const;
  WinAccess access(int peer) const;
  /// "shm" (host shared memory), "ipc" (CUDA IPC) or "nccl" (NCCL's one-sided API).
  const char* transport() const;

  /// torchcomms' get_device_window: collective on the first call after registerBuffer(); the
  /// address of this window's device handle (<cclx/device_window.h>: a kernel takes it as
  /// `DeviceWindow*` or torchcomms' `TorchCommDeviceWindow<CclxDeviceBackend>*`), with
  /// `signalCount` signals and `counterCount` counters (negative: the comm's size) and
  /// `barrierCount` barriers. Every rank must pass the same counts (cclxInvalidArgument on every
  /// rank, naming the ranks). Later calls return the same address when the counts fit the
  /// existing handle's (else cclxInvalidArgument). It lives until deregisterBuffer(), which
  /// first waits for this rank's device work; kernels that use it must have finished on every
  /// rank by then. CUDA comms of one host (transport "ipc"); CPU comms get the same handle in
  /// host memory (its methods are device code: a twin for checks); cclxUnsupported otherwise.
  /// Create it before capturing a CUDA graph that uses it.
  void* deviceWindow(int signalCount = -1, int counterCount = -1, int barrierCount = 1);
  /// The handle deviceWindow() placed, as the host built it (the pointers are the device's).
  const DeviceWindowHandle& deviceWindowHandle() const;
  const std::shared_ptr<Comm>& comm() const;

  // Internal.
  struct State;
  explicit Window(std::unique_ptr<State> st);

 private:
  std::unique_ptr<State> st_;
};

/// Host memory that a CPU comm's window can register: `bytes` of a new shared-memory file
/// (zeroed), mapped here. Free it with freeShared() once no window uses it.
void* allocShared(size_t bytes);
void freeShared(void* ptr);

/// `bytes` (rounded up to the allocation granularity) of device memory on CUDA device `device`
/// (-1: the current one) that every cclx transport can share: one-host windows map it on the
/// peers, NCCL's buffer registration (Comm::registerMemory) goes zero-copy on it (torchcomms'
/// get_mem_allocator). CUDA: the driver's virtual memory management API, exportable as a POSIX
/// file descriptor; HIP: hipMalloc. Errors: cclxInvalidArgument (0 bytes), cclxUnsupported
/// (build without CUDA, device without VMM), cclxCudaError (out of memory: the driver's message).
void* memAlloc(size_t bytes, int device = -1);
/// Frees what memAlloc returned, once the device's work is done (as cudaFree). nullptr: no-op.
void memFree(void* ptr);

}  // namespace cclx
