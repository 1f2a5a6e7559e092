// src/core/settings: every CCLX_* setting, read from the environment in exactly one place
// (config.cc: Config, unknown-name warnings, the reader logging uses) by one table of settings
// and hints (table.{h,cc}: names, fields, parsers, allowed values, defaults, docs; docs/SETTINGS.md
// is generated from it), and the settings every rank of a comm must share, checked across ranks
// at setup (settings_check.{h,cc}). A new setting is a field here and an entry in table.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/log.h"

namespace cclx {

struct Config {
  // Logging.
  LogLevel logLevel = LogLevel::WARN;  // CCLX_DEBUG=NONE|WARN|INFO|TRACE
  std::string logFile;                 // CCLX_DEBUG_FILE (default stderr; %h host, %p pid)

  // Correctness aids.
  bool checkMode = false;  // CCLX_CHECK_MODE=1: verify count/dtype/op/root match across ranks
  int64_t timeoutMs = -1;  // CCLX_TIMEOUT_MS: overrides Options::timeout when >= 0
  // CCLX_TIMEOUT, else TORCHCOMM_TIMEOUT_SECONDS (seconds, fractions allowed; 0 = infinite): the
  // timeout of comms whose Options leave it 0.
  int64_t defaultTimeoutMs = 600000;
  bool defaultTimeoutSet = false;  // one of the two variables is set (the NCCL drop-in's default
                                   // is no device deadline, as NCCL's)
  // CCLX_ABORT_ON_ERROR, else TORCHCOMM_ABORT_ON_ERROR: abort the process on a comm's timeout or
  // error, for comms whose Options leave abortOnError unset.
  bool abortOnError = true;
  bool abortOnErrorSet = false;  // one of the two variables is set (the C API defaults to off)
  // CCLX_WATCHDOG=0: no watchdog thread and no tracking of NCCL operations (failures are then
  // found only by calls and Work queries; for measuring the watchdog's cost).
  bool watchdog = true;

  // Rendezvous.
  std::string jobId = "cclx";  // CCLX_JOB_ID (else TORCHELASTIC_RUN_ID): store handshake id
  std::string storeToken;  // CCLX_STORE_TOKEN: the store's shared secret ("" = loopback only)

  // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, CUDA's own: the share of a GPU's SMs this process may use
  // under MPS ("" = unset); ranks sharing a GPU under MPS check it (core/sharing/mps.h).
  std::string mpsThreadPercent;

  // torchcomms: CCLX_TORCHCOMMS_ROUTE=auto|cxx|python, how torchcomms.new_comm("cclx") reaches
  // cclx (python/cclx/torchcomms_backend.py; docs/DESIGN.md "torchcomms backend").
  std::string torchcommsRoute = "auto";

  // Host shared-memory transport.
  size_t shmFlatMaxBytes = 64 << 10;   // CCLX_SHM_FLAT_MAX_BYTES: flat below, tree above
  size_t shmChunkBytes = 4 << 20;      // CCLX_SHM_CHUNK_BYTES: staging slot per rank per phase
  int spinIterations = 2000;           // CCLX_SPIN_ITERATIONS: busy polls before yielding

  // GPU: NCCL and the direct-access (DDA) allreduce.
  std::string ncclPath;                 // CCLX_NCCL_PATH: libnccl.so to dlopen first
  std::string ncclPipDir;               // CCLX_NCCL_PIP_DIR: lib dir of the nvidia-nccl pip package
  std::string allreduceAlgo = "auto";   // CCLX_ALLREDUCE_ALGO (values: table.cc, as hint "algo")
  bool ddaEnable = true;                // CCLX_DDA_ENABLE=0 disables DDA entirely
  size_t ddaFlatMaxBytes = 0;           // CCLX_DDA_FLAT_MAX_BYTES (0 = tuned table)
  size_t ddaLamportMaxBytes = 0;        // CCLX_DDA_LAMPORT_MAX_BYTES (0 = tuned table)
  size_t ddaTreeMaxBytes = 0;           // CCLX_DDA_TREE_MAX_BYTES (0 = tuned table)
  size_t ddaAllGatherMaxBytes = 0;      // CCLX_DDA_ALLGATHER_MAX_BYTES (0 = table; output bytes)
  size_t ddaReduceScatterMaxBytes = 0;  // CCLX_DDA_REDUCESCATTER_MAX_BYTES (0 = table; input bytes)
  size_t ddaAllToAllMaxBytes = 0;       // CCLX_DDA_ALLTOALL_MAX_BYTES (0 = table; input bytes)
  std::string peerMemShare = "auto";     // CCLX_PEER_MEM_SHARE: auto | ipc (gpu/peer_mem.h)
  size_t ddaStagingBytes = 176ull << 20; // CCLX_DDA_STAGING_BYTES: peer-visible staging per rank
  int ddaMaxBlocks = 0;                 // CCLX_DDA_MAX_BLOCKS (0 = tuned)
  size_t winPutCeMinBytes = 256 << 10;  // CCLX_WIN_PUT_CE_MIN_BYTES: window puts by copy engine
                                        // from this size up, by SM stores below

  // Low-precision (FP8) collectives.
  bool lpAllReduce = false;      // CCLX_LOW_PRECISION_ENABLE / _ALLREDUCE
  bool lpAllGather = false;      // CCLX_LOW_PRECISION_ENABLE / _ALLGATHER
  bool lpReduceScatter = false;  // CCLX_LOW_PRECISION_ENABLE / _REDUCESCATTER
  bool lpAllToAll = false;       // CCLX_LOW_PRECISION_ENABLE / _ALLTOALL
  size_t lpMinBytes = 16ull << 20;  // CCLX_LOW_PRECISION_MIN_BYTES
  int fp8BlockSize = 128;           // CCLX_FP8_BLOCK_SIZE (32..256, power of two)
  int fp8ProducerWarps = 0;         // CCLX_FP8_PRODUCER_WARPS (1..15 of 16; 0 = per collective)
  int fp8TilesPerCta = 1;           // CCLX_FP8_TILES_PER_CTA: pipeline depth wanted per CTA
  std::string fp8AllReduceAlgo = "auto";  // CCLX_FP8_ALLREDUCE_ALGO=auto|oneshot|twoshot
  size_t fp8OneShotMaxBytes = 0;    // CCLX_FP8_ONESHOT_MAX_BYTES (0 = tuned table)

  // Fused allreduce + residual add + RMSNorm (Comm::allReduceRmsNorm).
  std::string fusedAlgo = "auto";   // CCLX_FUSED_ALGO=auto|oneshot|twoshot|unfused
  size_t fusedOneShotMaxBytes = 0;  // CCLX_FUSED_ONESHOT_MAX_BYTES (0 = tuned table)
  size_t fusedTwoShotMaxBytes = 0;  // CCLX_FUSED_TWOSHOT_MAX_BYTES (0 = tuned table)
  size_t fusedStagingBytes = 32ull << 20;  // CCLX_FUSED_STAGING_BYTES: its peer-visible inboxes

  // Expert-parallel buffers (cclx.moe.Buffer) on CUDA: the kernels' launch shape, for buffers
  // whose MoeConfig leaves it 0.
  int moeMaxBlocks = 0;    // CCLX_MOE_MAX_BLOCKS (0 = by size, at most one per SM and 128)
  int moeChunkTokens = 0;  // CCLX_MOE_CHUNK_TOKENS (0 = the most whose tables fit)

  // NCCL drop-in (libnccl.so.2 built by cclx).
  bool ncclIntercept = true;     // CCLX_NCCL_INTERCEPT=0: forward every call to the real NCCL
  unsigned ncclForward = 0;      // CCLX_NCCL_FORWARD=allreduce,allgather,...: kForward* bits
  // CCLX_DROPIN_SHARED=auto|1|0: comms of 2..8 ranks whose ranks share a GPU run on a cclx comm
  // of their own, no NCCL comm underneath (auto: when two ranks share a GPU; 1: always; 0: never,
  // and no exchange before NCCL's init). -1 = auto.
  int dropinShared = -1;

  // Tests only: CCLX_TEST_SETUP_FAIL=<rank>:<stage> makes that rank's collective setup fail at
  // that stage (device, who, alloc, open; core/failure/setup_sequence.h).
  int testSetupFailRank = -1;
  std::string testSetupFailStage;

  /// Reads the environment. Throws cclx::Error(cclxInvalidArgument) on a malformed value.
  static Config fromEnv();
};

/// Bits of Config::ncclForward: collectives the drop-in always forwards.
enum : unsigned {
  kForwardAllReduce = 1,
  kForwardAllGather = 2,
  kForwardReduceScatter = 4,
  kForwardAllToAll = 8,
};

/// The process-wide configuration, read on first use.
const Config& config();
/// Re-reads the environment (tests that change CCLX_* variables call this).
void reloadConfig();

/// What rendezvous needs even when a setting is malformed, so that this rank can still reach
/// the store and tell the others why it fails: the job id, the store's token, the timeouts that
/// parse (else their defaults), and config()'s error ("" when the environment is fine).
struct RendezvousConfig {
  std::string jobId;
  std::string storeToken;
  int64_t timeoutMs = -1;            // CCLX_TIMEOUT_MS
  int64_t defaultTimeoutMs = 600000;  // CCLX_TIMEOUT / TORCHCOMM_TIMEOUT_SECONDS (0 = none)
  std::string error;
};
RendezvousConfig rendezvousConfig();

/// Every CCLX_* environment name that cclx, its Python package or its scripts read.
const std::vector<std::string>& knownEnvNames();
/// "CCLX_X (did you mean CCLX_Y?)" for each CCLX_* name in `env` (an environ-style array) that
/// is not known.
std::vector<std::string> unknownEnvNames(char** env);

}  // namespace cclx
