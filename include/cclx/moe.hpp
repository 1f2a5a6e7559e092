// cclx expert-parallel (MoE) buffer: the dispatch and combine of a mixture-of-experts layer as one
// kernel each way over memory every rank of one host maps (CUDA), or the same protocol over host
// shared memory (CPU comms). docs/design/moe.md has the protocol, the layouts and the failure
// behaviour; python/cclx/moe (cclx.moe.Buffer) is the torch front end.
//
//   auto buf = cclx::MoeBuffer::create(comm, cfg);      // collective, once
//   buf->dispatch(x, ids, DataType::i64, weights, T);   // enqueued on the stream, no host sync
//   ... experts read outputs() rows, write expert_out in entry order ...
//   buf->combine(expertOut, rows, y);                   // y [T, H] in the tokens' order
//
// Experts are placed contiguously: rank r holds experts r*L .. r*L+L-1, L = numExperts / size.
// Each token travels once to each rank holding at least one of its top-k experts, into that rank's
// receive slots [source rank][position] (rank-major: N * maxTokensPerRank rows), quantized to FP8
// e4m3 with one f32 scale per 128 values when cfg.fp8 (cclx's block codec). Combine sends, per
// (token, rank) pair, the weighted f32 sum of that rank's expert outputs for the token (rounded
// once to the dtype) back to the token's owner, which adds its ranks' rows in f32 in top-k order
// and rounds once.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

namespace cclx {

struct MoeConfig {
  size_t maxTokensPerRank = 0;      // B: the most tokens any rank dispatches in one call (>= 1)
  size_t hidden = 0;                // H (>= 1)
  int numExperts = 0;               // E, a multiple of the world size
  int topK = 0;                     // k, 1..16
  DataType dtype = DataType::bf16;  // tokens, expert outputs and combine output: f32, bf16, f16
  bool fp8 = false;                 // dispatch rows travel as FP8 e4m3 + one f32 scale per 128
  // Launch shape of the CUDA kernels (ignored elsewhere; neither changes any output bit):
  int maxBlocks = 0;    // thread blocks (SMs) per kernel, 0..128; 0: CCLX_MOE_MAX_BLOCKS, whose
                        // 0 is by size (at most one per SM and 128)
  int chunkTokens = 0;  // tokens per routing chunk of the dispatch kernel (its shared-memory
                        // tables), 0..2^20; 0: CCLX_MOE_CHUNK_TOKENS, whose 0 is the most that fit
  // Memory (changes no output bit either; the same on every rank, like the sizes above):
  int ringTokens = 0;   // combine rows per expert rank at each owner, 0 or 4..2^20 (0: 4096);
                        // a larger maxTokensPerRank makes combine run in rounds through them
};

/// Which engine runs a buffer: the CUDA kernels over peer memory (ranks of one host, or world
/// size 1), the CPU twin over host shared memory (CPU comms), or none (create() refuses: the
/// Python front end then runs the composed path of torch ops and collectives).
enum class MoeRoute : int { Kernels = 0, Host = 1, Composed = 2 };
const char* moeRouteName(MoeRoute r);

/// Where this rank's outputs live: byte offsets from MoeBuffer::data() (valid for the buffer's
/// life; every dispatch rewrites them). S = size * maxTokensPerRank receive slots, kk =
/// min(topK, numExperts / size), C = S * kk entries.
struct MoeOutputs {
  size_t recvX = 0;           // S rows of recvXRowBytes: slot s*B + p = the p-th token rank s sent
  size_t recvXRowBytes = 0;   //   here (hidden values of dtype, or hidden FP8 codes)
  size_t recvScales = 0;      // FP8: f32 [S][nb], nb = ceil(hidden / 128): codec metas (a
                              //   scale; the sign bit marks a block holding +-Inf, codes 0x7E /
                              //   0xFE there mean +-Inf); absent (0) without FP8
  size_t recvCounts = 0;      // int32 [size]: tokens received from each rank
  size_t expertCounts = 0;    // int32 [L]: entries of each local expert
  size_t expertOffsets = 0;   // int32 [L+1]: exclusive prefix sums of expertCounts
  size_t entryRows = 0;       // int32 [C]: entry i's row in recvX (entries of local expert l:
                              //   expertOffsets[l] .. expertOffsets[l+1], by source rank, then
                              //   the source's token order)
  size_t entryCap = 0;        // C
  size_t slotEntries = 0;     // int32 [S][kk]: a received slot's entries (top-k order, -1 pad)
  size_t slotWeights = 0;     // f32 [S][kk]: their weights
  size_t tokRows = 0;         // int32 [B][topK]: combine's routing of this rank's own tokens
};

struct MoeOptions {
  void* stream = nullptr;                 // CUDA: the cudaStream_t it is enqueued on
  std::chrono::milliseconds timeout{0};   // 0: the comm's timeout
  // dispatch / dispatchCached: send only (the tokens leave; nothing of this call is received
  // yet); dispatchRecv() later receives them, so that other work runs between the two (the
  // expert computation of another micro-batch). Until then the buffer takes no other call.
  bool recvLater = false;
};

class MoeEngine;

class MoeBuffer {
 public:
  /// The engine a buffer of `cfg` would run on for `comm`; `why` (if given) says why not the
  /// kernels. Local, no communication: every rank of a comm gets the same answer.
  static MoeRoute route(Comm& comm, const MoeConfig& cfg, std::string* why = nullptr);
  /// Collective: allocates this rank's memory once (bytes()), maps every peer's. Throws
  /// cclxInvalidArgument for a bad config (nothing allocated) and cclxUnsupported when the route
  /// is Composed.
  static std::shared_ptr<MoeBuffer> create(const std::shared_ptr<Comm>& comm,
                                           const MoeConfig& cfg);
  ~MoeBuffer();
  MoeBuffer(const MoeBuffer&) = delete;
  MoeBuffer& operator=(const MoeBuffer&) = delete;

  /// Collective (every rank, the same order of calls). x [numTokens, hidden] of cfg.dtype,
  /// topkIds [numTokens, topK] of idsType (i32 / i64; ids outside 0..E-1 are dropped and make the
  /// token's combine row NaN), topkWeights [numTokens, topK] f32; numTokens <= maxTokensPerRank.
  /// CUDA: one kernel on o.stream, no host synchronization, no allocation (graph capturable).
  /// CPU: runs on the calling thread and has finished when it returns.
  void dispatch(const void* x, const void* topkIds, DataType idsType, const float* topkWeights,
                size_t numTokens, const MoeOptions& o = {});
  /// dispatch() with the routing (ids, weights) of the last dispatch of this buffer, kept in its
  /// memory (cached mode): the same numTokens; every rank must call it alike.
  void dispatchCached(const void* x, const MoeOptions& o = {});
  /// Collective: the receiving half of a dispatch sent with o.recvLater (every rank calls it
  /// after its own send; CUDA: one kernel on o.stream, whose deadline starts at its launch). The
  /// outputs are those of the whole dispatch. cclxInvalidUsage when no send is pending.
  void dispatchRecv(const MoeOptions& o = {});
  /// True between a dispatch sent with recvLater and its dispatchRecv().
  bool recvPending() const;
  /// Collective: expertOut [expertRows, hidden] of cfg.dtype holds entry i's expert output in row
  /// i (entries beyond expertRows give NaN rows); out [T, hidden] of cfg.dtype, T = the last
  /// dispatch's numTokens: per token the weighted sum of its experts' outputs.
  void combine(const void* expertOut, size_t expertRows, void* out, const MoeOptions& o = {});
  /// Collective: every rank done with the buffer, then peers unmap it and it is freed. A buffer
  /// destroyed without it (or on a failed comm) leaves its memory allocated (peers may map it).
  void destroy();

  MoeRoute engineRoute() const;
  const MoeConfig& config() const;
  const MoeOutputs& outputs() const;
  /// This rank's memory (bytes() bytes: receive slots, combine slots, routing; docs/design/moe.md)
  void* data() const;
  size_t bytes() const;
  /// Tokens of the last dispatch (what combine writes).
  size_t lastTokens() const;
  /// Blocks of a kernel launch (0 on CPU).
  int blocks() const;
  /// Tokens per routing chunk of the dispatch kernel (0 on CPU).
  int chunkTokens() const;
  /// Combine ring: rows per expert rank at each owner, and tokens per round (the whole batch
  /// when maxTokensPerRank fits the ring: one round).
  int ringRows() const;
  int ringRound() const;
  const std::shared_ptr<Comm>& comm() const;

  // Internal.
  struct State;
  explicit MoeBuffer(std::unique_ptr<State> st);

 private:
  std::unique_ptr<State> st_;
};

}  // namespace cclx
