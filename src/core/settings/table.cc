// The table of settings and hints (see table.h); the parsers and checks that read it are in
// table_parse.cc, docs/SETTINGS.md's generator in table_doc.cc.
#include "core/settings/table.h"

#include <iterator>

#include "core/select/algorithms.h"

namespace cclx::settings {

namespace {

// The member the parser filled, for the field's type.
void put(bool& f, const Value& v) { f = v.b; }
void put(size_t& f, const Value& v) { f = size_t(v.n); }
void put(int& f, const Value& v) { f = int(v.i); }
void put(int64_t& f, const Value& v) { f = v.i; }
void put(std::string& f, const Value& v) { f = v.s; }

// An entry's field name and the setter that stores a parsed value in it.
#define CCLX_FIELD(f) #f, [](Config& c, const Value& v) { put(c.f, v); }

constexpr int64_t kMaxMs = int64_t(1) << 40;
// The values of a hint that names algorithms: the catalogue's (core/select/algorithms.def),
// filled in by table().
constexpr const char* kFromCatalogue = nullptr;
constexpr const char* kTuned = "0 (tuned)";

LogLevel logLevel(const std::string& s) {
  if (s == "warn") return LogLevel::WARN;
  if (s == "info") return LogLevel::INFO;
  if (s == "trace") return LogLevel::TRACE;
  return LogLevel::NONE;  // none, off, 0
}

unsigned forwardMask(const std::vector<std::string>& items) {
  unsigned m = 0;
  for (const std::string& s : items) {
    if (s == "allreduce") m |= kForwardAllReduce;
    else if (s == "allgather") m |= kForwardAllGather;
    else if (s == "reducescatter") m |= kForwardReduceScatter;
    else if (s == "alltoall") m |= kForwardAllToAll;
    else if (s == "all")
      m |= kForwardAllReduce | kForwardAllGather | kForwardReduceScatter | kForwardAllToAll;
  }
  return m;
}

using K = Kind;

const Entry kLibrary[] = {
    // Logging.
    {"CCLX_DEBUG", nullptr, nullptr, K::Choice, "none|warn|info|trace|off|0", 0, 0, "warn",
     "Log level: `none` (also `off`, `0`: silent), `warn` (warnings only: unknown settings, long "
     "waits), `info` or `trace`. Lines look like `host:pid:tid [rank] CCLX INFO ...`",
     "logLevel", [](Config& c, const Value& v) { c.logLevel = logLevel(v.s); }},
    {"CCLX_DEBUG_FILE", nullptr, nullptr, K::Text, nullptr, 0, 0, "stderr",
     "Log file; `%h` expands to the host name, `%p` to the pid", CCLX_FIELD(logFile)},
    // Correctness aids.
    {"CCLX_CHECK_MODE", nullptr, nullptr, K::Bool, nullptr, 0, 0, "0",
     "`1`: before each collective, ranks compare (collective, count, dtype, op, root) through the "
     "store; a mismatch raises `cclxInvalidUsage` naming the ranks that disagree (slow; for "
     "debugging)",
     CCLX_FIELD(checkMode)},
    {"CCLX_TIMEOUT_MS", nullptr, nullptr, K::Int, nullptr, 1, kMaxMs, "unset",
     "Overrides every comm's timeout (milliseconds), connecting to the store included",
     CCLX_FIELD(timeoutMs)},
    {"CCLX_TIMEOUT", "TORCHCOMM_TIMEOUT_SECONDS", nullptr, K::Seconds, nullptr, 0, 0, "600",
     "Timeout (seconds) of comms created without one; `0` = none (collectives wait until the "
     "peer arrives or the comm is aborted)",
     "defaultTimeoutMs, defaultTimeoutSet",
     [](Config& c, const Value& v) { c.defaultTimeoutMs = v.i, c.defaultTimeoutSet = true; }},
    {"CCLX_ABORT_ON_ERROR", "TORCHCOMM_ABORT_ON_ERROR", nullptr, K::Bool, nullptr, 0, 0, "1",
     "On a comm's timeout or error: print one line, run the abort hooks, abort the process "
     "(torchcomms' `abort_process_on_timeout_or_error`); `0`: the comm fails and its next call "
     "and Work methods raise. The C API defaults to `0` unless set",
     "abortOnError, abortOnErrorSet",
     [](Config& c, const Value& v) { c.abortOnError = v.b, c.abortOnErrorSet = true; }},
    {"CCLX_WATCHDOG", nullptr, nullptr, K::Bool, nullptr, 0, 0, "1",
     "`0`: no watchdog thread and no tracking of NCCL operations (failures are then found only "
     "by calls and Work queries); for measuring its cost",
     CCLX_FIELD(watchdog)},
    // Rendezvous.
    {"CCLX_JOB_ID", "TORCHELASTIC_RUN_ID", nullptr, K::Text, nullptr, 0, 0, "cclx",
     "Job id presented to the store; a store of another job refuses the connection",
     CCLX_FIELD(jobId)},
    {"CCLX_STORE_TOKEN", nullptr, nullptr, K::Text, nullptr, 0, 0, "unset",
     "The store's shared secret (at least 16 characters, the same on every rank); needed for a "
     "routable `MASTER_ADDR`, else the store serves loopback only (README, \"Store token\")",
     CCLX_FIELD(storeToken)},
    {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", nullptr, nullptr, K::Text, nullptr, 0, 0, "unset",
     "CUDA's own: the share of a GPU's SMs this process may use under MPS; ranks sharing a GPU "
     "under MPS check it",
     CCLX_FIELD(mpsThreadPercent)},
    {"CCLX_TORCHCOMMS_ROUTE", nullptr, nullptr, K::Choice, "auto|cxx|python", 0, 0, "auto",
     "How `torchcomms.new_comm(\"cclx\")` reaches cclx: `cxx` (libcclx_torchcomms.so, "
     "torchcomms' C++ backend route), `python` (the Python backend class) or `auto` (`cxx` when "
     "the library is there and was built for the installed torchcomms, else `python`)",
     CCLX_FIELD(torchcommsRoute)},
    // Host shared-memory transport.
    {"CCLX_SHM_FLAT_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "64K",
     "Host transport: flat allreduce up to this size, tree above", CCLX_FIELD(shmFlatMaxBytes)},
    {"CCLX_SHM_CHUNK_BYTES", nullptr, nullptr, K::Size, nullptr, 4096, 0, "4M",
     "Host transport: staging slot per rank per phase", CCLX_FIELD(shmChunkBytes)},
    {"CCLX_SPIN_ITERATIONS", nullptr, nullptr, K::Int, nullptr, 0, 1 << 30, "2000",
     "Host transport: busy polls before yielding the CPU", CCLX_FIELD(spinIterations)},
    // GPU: NCCL and the direct-access (DDA) kernels.
    {"CCLX_NCCL_PATH", nullptr, nullptr, K::Text, nullptr, 0, 0, "unset",
     "`libnccl.so` to load first", CCLX_FIELD(ncclPath)},
    {"CCLX_NCCL_PIP_DIR", nullptr, nullptr, K::Text, nullptr, 0, 0, "set by the Python package",
     "`lib` directory of the `nvidia-nccl` pip package, tried after an already-loaded NCCL",
     CCLX_FIELD(ncclPipDir)},
    {"CCLX_ALLREDUCE_ALGO", nullptr, "algo", K::Choice, kFromCatalogue, 0, 0, "auto",
     "Algorithm by its name in docs/ALGORITHMS.md: allreduce `flat`, `lamport`, `tree`; "
     "all-gather, reduce-scatter, all-to-all `ll` (alias `flat`), `pipelined` (alias `tree`); "
     "`base` (alias `nccl`); `dda` (the direct-access kernels at every size) or `auto` (by "
     "size). The hint applies to every collective (a name that does not serve it means `auto`, "
     "on the collectives on grouped messages the pipelined exchange); the setting to allreduce "
     "only",
     CCLX_FIELD(allreduceAlgo)},
    {"CCLX_DDA_ENABLE", nullptr, nullptr, K::Bool, nullptr, 0, 0, "1",
     "`0` disables the direct-access (DDA) kernels (allreduce, all-gather, reduce-scatter, "
     "all-to-all)",
     CCLX_FIELD(ddaEnable)},
    {"CCLX_DDA_FLAT_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, kTuned,
     "DDA flat allreduce up to this size; also the largest block the DDA LL exchange "
     "(all-gather, reduce-scatter, all-to-all) takes",
     CCLX_FIELD(ddaFlatMaxBytes)},
    {"CCLX_DDA_LAMPORT_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, kTuned,
     "DDA Lamport (one-shot, data as flag; float types) allreduce up to this size when it fits "
     "one inbox",
     CCLX_FIELD(ddaLamportMaxBytes)},
    {"CCLX_DDA_TREE_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, kTuned,
     "DDA tree allreduce up to this size; NCCL above", CCLX_FIELD(ddaTreeMaxBytes)},
    {"CCLX_DDA_ALLGATHER_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "0 (= 16M)",
     "DDA all-gather up to this output size per rank; NCCL above",
     CCLX_FIELD(ddaAllGatherMaxBytes)},
    {"CCLX_DDA_REDUCESCATTER_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "0 (= 8M)",
     "DDA reduce-scatter up to this input size per rank; NCCL above (bitwise ops: DDA at any "
     "size)",
     CCLX_FIELD(ddaReduceScatterMaxBytes)},
    {"CCLX_DDA_ALLTOALL_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "0 (= 2M)",
     "DDA all-to-all up to this input size per rank; NCCL above (all-to-all-v: DDA at any size, "
     "its sizes differ per rank)",
     CCLX_FIELD(ddaAllToAllMaxBytes)},
    {"CCLX_PEER_MEM_SHARE", nullptr, nullptr, K::Choice, "auto|ipc", 0, 0, "auto",
     "How the ranks of one host share peer memory (signal areas, staging): `auto` (memory of "
     "CUDA's virtual memory management API passed as file descriptors where every rank can, "
     "which outlives a rank that dies; else legacy CUDA IPC) or `ipc` (legacy CUDA IPC, whose "
     "memory the driver frees when its process exits)",
     CCLX_FIELD(peerMemShare)},
    {"CCLX_DDA_STAGING_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "176M",
     "Most peer-visible staging per rank, in regions allocated by the first call that needs each "
     "(a comm that runs no DDA call holds none): flat/LL 1/22, tree 3/22, Lamport 4/22, FP8 "
     "4/22, FP8 one-shot 7/22, pipelined exchange 3/22; the fused allreduce + RMSNorm has its "
     "own, `CCLX_FUSED_STAGING_BYTES`",
     CCLX_FIELD(ddaStagingBytes)},
    {"CCLX_DDA_MAX_BLOCKS", nullptr, nullptr, K::Int, nullptr, 0, 1024, kTuned,
     "Thread blocks per DDA kernel", CCLX_FIELD(ddaMaxBlocks)},
    {"CCLX_WIN_PUT_CE_MIN_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "256K",
     "One-sided window puts between GPUs of one host: by copy engine from this size up, by SM "
     "stores below (per call: hint `put_path`)",
     CCLX_FIELD(winPutCeMinBytes)},
    // Low-precision (FP8) collectives.
    {"CCLX_LOW_PRECISION_ENABLE", nullptr, nullptr, K::Bool, nullptr, 0, 0, "0",
     "`1` turns on FP8 for all four collectives below",
     "lpAllReduce, lpAllGather, lpReduceScatter, lpAllToAll",
     [](Config& c, const Value& v) {
       c.lpAllReduce = c.lpAllGather = c.lpReduceScatter = c.lpAllToAll = v.b;
     }},
    {"CCLX_LOW_PRECISION_ALLREDUCE", nullptr, nullptr, K::Bool, nullptr, 0, 0, "from `_ENABLE`",
     "FP8 allreduce on/off", CCLX_FIELD(lpAllReduce)},
    {"CCLX_LOW_PRECISION_ALLGATHER", nullptr, nullptr, K::Bool, nullptr, 0, 0, "from `_ENABLE`",
     "FP8 all-gather on/off", CCLX_FIELD(lpAllGather)},
    {"CCLX_LOW_PRECISION_REDUCESCATTER", nullptr, nullptr, K::Bool, nullptr, 0, 0,
     "from `_ENABLE`", "FP8 reduce-scatter on/off", CCLX_FIELD(lpReduceScatter)},
    {"CCLX_LOW_PRECISION_ALLTOALL", nullptr, nullptr, K::Bool, nullptr, 0, 0, "from `_ENABLE`",
     "FP8 all-to-all on/off", CCLX_FIELD(lpAllToAll)},
    {nullptr, nullptr, "low_precision", K::Choice, "fp8|off", 0, 0, "unset",
     "Per call or per comm: `fp8` runs allreduce, all-gather, reduce-scatter or all-to-all in "
     "FP8 at any size (f32/bf16/f16 data, SUM/AVG reductions), `off` never; unset: the "
     "`CCLX_LOW_PRECISION_*` settings. On reduce_scatter_quantized `fp8` sends FP8 (per-block "
     "scales, round to nearest, the seed unused) instead of bf16 where the FP8 reduce-scatter "
     "runs",
     "", nullptr},
    {"CCLX_LOW_PRECISION_MIN_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "16M",
     "FP8 applies from this message size up", CCLX_FIELD(lpMinBytes)},
    {"CCLX_FP8_BLOCK_SIZE", nullptr, nullptr, K::Pow2, nullptr, 32, 256, "128",
     "Values per FP8 scale", CCLX_FIELD(fp8BlockSize)},
    {"CCLX_FP8_PRODUCER_WARPS", nullptr, nullptr, K::Int, nullptr, 0, 15, "0 (= 8; all-to-all 6)",
     "FP8 all-gather / reduce-scatter / all-to-all: warps of each 16-warp CTA that quantize and "
     "push (the rest decode)",
     CCLX_FIELD(fp8ProducerWarps)},
    {"CCLX_FP8_TILES_PER_CTA", nullptr, nullptr, K::Int, nullptr, 1, 64, "1",
     "FP8 collectives: tiles each CTA pipelines at least, where the message is large enough",
     CCLX_FIELD(fp8TilesPerCta)},
    {"CCLX_FP8_ALLREDUCE_ALGO", nullptr, "fp8_algo", K::Choice, kFromCatalogue, 0, 0, "auto",
     "FP8 allreduce: `fp8_oneshot` (alias `oneshot`: every rank pushes its quantized input to "
     "every peer, one quantization), `fp8` (alias `twoshot`: reduce-scatter + all-gather) or "
     "`auto` (by size)",
     CCLX_FIELD(fp8AllReduceAlgo)},
    {"CCLX_FP8_ONESHOT_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0,
     "0 (= 32M for 2 ranks, off for more)",
     "auto runs the FP8 allreduce one-shot up to this size (when it fits the inboxes)",
     CCLX_FIELD(fp8OneShotMaxBytes)},
    // Fused allreduce + residual add + RMSNorm.
    {"CCLX_FUSED_ALGO", nullptr, "fused_algo", K::Choice, kFromCatalogue, 0, 0, "auto",
     "Fused allreduce + residual add + RMSNorm: `fused_oneshot` (alias `oneshot`), "
     "`fused_twoshot` (alias `twoshot`), `unfused` (the allreduce, then a norm kernel) or `auto` "
     "(the size rule of docs/design/fused-rmsnorm.md)",
     CCLX_FIELD(fusedAlgo)},
    {"CCLX_FUSED_ONESHOT_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, kTuned,
     "auto runs the fused one-shot up to this size (tokens x hidden x element bytes) when it "
     "fits its inboxes",
     CCLX_FIELD(fusedOneShotMaxBytes)},
    {"CCLX_FUSED_TWOSHOT_MAX_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, kTuned,
     "auto runs the fused two-shot up to this size; the unfused sequence above",
     CCLX_FIELD(fusedTwoShotMaxBytes)},
    {"CCLX_FUSED_STAGING_BYTES", nullptr, nullptr, K::Size, nullptr, 0, 0, "32M",
     "Peer-visible inboxes of the fused allreduce + RMSNorm per rank (besides "
     "`CCLX_DDA_STAGING_BYTES`)",
     CCLX_FIELD(fusedStagingBytes)},
    // Expert-parallel buffers.
    {"CCLX_MOE_MAX_BLOCKS", nullptr, nullptr, K::Int, nullptr, 0, 128, "0 (= by size)",
     "Thread blocks (SMs) of each `cclx.moe.Buffer` kernel, for buffers created without "
     "`num_sms`; 0: a warp per token, per two received rows and per combine row piece, at most "
     "one block per SM and 128",
     CCLX_FIELD(moeMaxBlocks)},
    {"CCLX_MOE_CHUNK_TOKENS", nullptr, nullptr, K::Int, nullptr, 0, 1 << 20,
     "0 (= the most that fit)",
     "Tokens per routing chunk of the `cclx.moe.Buffer` dispatch kernel (its shared-memory "
     "tables), for buffers created without `chunk_tokens`; rounded up to 32; 0: the most whose "
     "tables fit 144 KiB (48 KiB on HIP): 4096 tokens at 256 experts",
     CCLX_FIELD(moeChunkTokens)},
    // One-sided windows (hint only; the size rule is CCLX_WIN_PUT_CE_MIN_BYTES).
    {nullptr, nullptr, "put_path", K::Choice, "auto|ce|sm", 0, 0, "auto",
     "Per call: how a window put between GPUs of one host moves its data: `ce` (copy engine), "
     "`sm` (SM stores) or `auto` (by size, `CCLX_WIN_PUT_CE_MIN_BYTES`)",
     "", nullptr},
    // NCCL drop-in.
    {"CCLX_NCCL_INTERCEPT", nullptr, nullptr, K::Bool, nullptr, 0, 0, "1",
     "NCCL drop-in: `0` forwards every call to the real NCCL", CCLX_FIELD(ncclIntercept)},
    {"CCLX_NCCL_FORWARD", nullptr, nullptr, K::List,
     "allreduce|allgather|reducescatter|alltoall|all", 0, 0, "unset",
     "NCCL drop-in: collectives always forwarded to the real NCCL (`all`: the four)",
     "ncclForward", [](Config& c, const Value& v) { c.ncclForward = forwardMask(v.items); }},
    {"CCLX_DROPIN_SHARED", nullptr, nullptr, K::AutoBool, nullptr, 0, 0, "auto",
     "NCCL drop-in: comms of 2..8 ranks run on a cclx comm without NCCL when two of their ranks "
     "share a GPU (`auto`), always (`1`), or never, with no exchange before NCCL's init (`0`); "
     "the same on every rank",
     CCLX_FIELD(dropinShared)},
    // Tests only.
    {"CCLX_TEST_SETUP_FAIL", nullptr, nullptr, K::RankStage, "device|who|alloc|open", 0, 1 << 20,
     "unset",
     "Tests only: `<rank>:<stage>` makes that rank's GPU comm setup fail at `device`, `who` "
     "(setup fails on every rank), `alloc` or `open` (peer memory off on every rank); "
     "docs/design/failure.md, \"Tests\"",
     "testSetupFailRank, testSetupFailStage",
     [](Config& c, const Value& v) { c.testSetupFailRank = int(v.i), c.testSetupFailStage = v.s; }},
    // Parsed at each growth by core/failure/grow_fault.h (a test may set it per comm; a malformed
    // value fails that growth's call naming the variable): known and documented here, no field.
    {"CCLX_TEST_GROW_FAIL", nullptr, nullptr, K::Text, nullptr, 0, 0, "unset",
     "Tests only: `<rank\\|all>:<n>` makes the n-th peer-staging growth of each GPU comm fail on "
     "that rank (or all) as a failed allocation would: the call chooses again or fails cleanly "
     "on every rank; docs/design/failure.md, \"Tests\"",
     "(read at each growth)", [](Config&, const Value&) {}},
};

// Read outside the library: known (no unknown-name warning) and documented, not parsed here.
#define CCLX_OUTSIDE(name, def, doc) \
  {name, nullptr, nullptr, K::Text, nullptr, 0, 0, def, doc, "", nullptr, Reader::Outside}
const Entry kOutside[] = {
    CCLX_OUTSIDE("CCLX_EXT_DIR", "unset",
                 "Python package: the folder of the `_C` extension to import (a build tree's "
                 "`python/cclx`)"),
    CCLX_OUTSIDE("CCLX_DROPIN_LIB", "unset",
                 "Python package: the NCCL drop-in library `cclx.dropin` tries first"),
    CCLX_OUTSIDE("CCLX_GIT_COMMIT", "unset",
                 "Build: the commit recorded for a source tree copied without `.git`"),
    CCLX_OUTSIDE("CCLX_ENABLE_CUDA", "unset", "Build scripts: the CMake option of that name"),
    CCLX_OUTSIDE("CCLX_CUDA_ARCH", "90", "GPU test scripts: the CUDA architecture built for"),
    CCLX_OUTSIDE("CCLX_TEST_ONLY", "unset",
                 "Python tests: a comma list of the cases a multi-rank run executes"),
    CCLX_OUTSIDE("CCLX_TEST_RANK_WRAPPER", "unset",
                 "Python tests: a command (shell words) put before every rank process, e.g. "
                 "compute-sanitizer; a rank exiting non-zero fails the module's cases "
                 "(tests/python/harness.py)"),
    CCLX_OUTSIDE("CCLX_TEST_RANKS", "unset",
                 "GPU tests: the world size of the C++ GPU suites (ranks sharing the GPUs); a "
                 "list (\"2 3 4 8\") gives the GPU Python tests their world sizes"),
    CCLX_OUTSIDE("CCLX_TEST_PG_PORT", "unset",
                 "GPU Python tests: the port of the reference process group"),
    CCLX_OUTSIDE("CCLX_TEST_WINDOW_ROUNDS", "10000",
                 "GPU window tests: back-to-back rounds of the window stress case"),
    CCLX_OUTSIDE("CCLX_TEST_TIME_SCALE", "1",
                 "Tests: a factor on the timeouts failure cases wait out and on stress rounds "
                 "(below 1: quick runs, at least 1 s; above 1: sanitized runs); hang guards "
                 "only grow (tests/cpp/helpers/scale.h)"),
    CCLX_OUTSIDE("CCLX_EXTRAS", "every extra",
                 "scripts/test.sh, run.sh: the pyproject extras installed into the virtual "
                 "environment, space-separated"),
    CCLX_OUTSIDE("CCLX_VENV", "`.venv`",
                 "scripts/test.sh, run.sh: the folder of the project's virtual environment"),
    CCLX_OUTSIDE("CCLX_TEST_EXCHANGE_SIZES", "2..8",
                 "Host exchange tests: the world sizes to run (e.g. `\"2 5\"`)"),
};

}  // namespace

const std::vector<Entry>& table() {
  static const std::vector<Entry> t = [] {
    std::vector<Entry> v(std::begin(kLibrary), std::end(kLibrary));
    for (Entry& e : v)
      if (e.kind == Kind::Choice && !e.values) e.values = catalogueHintValues(e.hint);
    v.insert(v.end(), std::begin(kOutside), std::end(kOutside));
    return v;
  }();
  return t;
}

}  // namespace cclx::settings
