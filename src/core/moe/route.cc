// The route of an expert-parallel buffer (MoeBuffer::route): the one table that says which engine
// runs a MoeBuffer, and the config checks every route shares. docs/design/moe.md, "Routes".
#include <cclx/moe.hpp>

#include <climits>
#include <string>

#include "base/error.h"
#include "core/comm/comm_internal.h"
#include "core/moe/engine.h"
#include "core/moe/layout.h"

namespace cclx {

std::string Backend::moeRefusal(const moe::Layout&) const {
  return strFormat("the %s backend has no MoE engine", name());
}

std::unique_ptr<MoeEngine> Backend::newMoe(const moe::Layout&, const MoeConfig&) {
  CCLX_THROW(cclxUnsupported, "the %s backend has no MoE engine", name());
}

const char* moeRouteName(MoeRoute r) {
  switch (r) {
    case MoeRoute::Kernels: return "kernels";
    case MoeRoute::Host: return "host";
    case MoeRoute::Composed: break;
  }
  return "composed";
}

namespace moe {

/// Throws cclxInvalidArgument for a config no route can run on `size` ranks; else its layout.
Layout checkedLayout(const MoeConfig& c, int size, int rank) {
  const char* op = "cclx.moe.Buffer";
  CCLX_ARG_CHECK(c.maxTokensPerRank >= 1 && c.maxTokensPerRank <= (size_t(1) << 20),
                 "%s: max_tokens_per_rank must be 1..2^20, not %zu", op, c.maxTokensPerRank);
  CCLX_ARG_CHECK(c.hidden >= 1 && c.hidden <= (size_t(1) << 20),
                 "%s: hidden must be 1..2^20, not %zu", op, c.hidden);
  CCLX_ARG_CHECK(c.numExperts >= 1 && c.numExperts <= 65536 && c.numExperts % size == 0,
                 "%s: num_experts (%d) must be a positive multiple of the world size %d, at most "
                 "65536 (experts are placed contiguously, num_experts / size per rank)",
                 op, c.numExperts, size);
  CCLX_ARG_CHECK(c.topK >= 1 && c.topK <= kMaxTopK, "%s: top_k must be 1..%d, not %d", op,
                 kMaxTopK, c.topK);
  CCLX_ARG_CHECK(c.dtype == DataType::f32 || c.dtype == DataType::bf16 ||
                     c.dtype == DataType::f16,
                 "%s: dtype must be float32, bfloat16 or float16, not %s", op, dtypeName(c.dtype));
  CCLX_ARG_CHECK(c.maxTokensPerRank * size_t(size) <= size_t(1) << 24,
                 "%s: max_tokens_per_rank * world size (%zu) must stay below 2^24", op,
                 c.maxTokensPerRank * size_t(size));
  CCLX_ARG_CHECK(c.maxBlocks >= 0 && c.maxBlocks <= kGridCap,
                 "%s: num_sms (blocks per kernel) must be 0 (auto) .. %d, not %d", op, kGridCap,
                 c.maxBlocks);
  CCLX_ARG_CHECK(c.chunkTokens >= 0 && c.chunkTokens <= (1 << 20),
                 "%s: chunk_tokens must be 0 (auto) .. 2^20, not %d", op, c.chunkTokens);
  CCLX_ARG_CHECK(c.ringTokens == 0 || (c.ringTokens >= kRingDepth && c.ringTokens <= (1 << 20)),
                 "%s: ring_tokens must be 0 (auto) or %d .. 2^20, not %d", op, kRingDepth,
                 c.ringTokens);
  return makeLayout(size, rank, int(c.maxTokensPerRank), int(c.hidden), c.numExperts, c.topK,
                    int(c.dtype), int(dtypeSize(c.dtype)), c.fp8, c.ringTokens);
}

}  // namespace moe

// The table. A CPU comm always has the host twin (any world size, host shared memory). A CUDA
// comm has the kernels where its backend can map every peer's memory (world size 1, or ranks of
// one host with peer memory: P2P between every pair, or ranks sharing a GPU) and the kernels fit
// the device (moeRefusal); everything else (ranks on several hosts, peer memory off) is the
// composed path of python/cclx/moe (torch ops around the comm's all-to-all-v).
MoeRoute MoeBuffer::route(Comm& comm, const MoeConfig& cfg, std::string* why) {
  CommState& cs = CommAccess::state(comm);
  requireUsable(cs, "cclx.moe.Buffer");
  const moe::Layout lay = moe::checkedLayout(cfg, cs.info.size, cs.info.rank);
  const std::string no = cs.backend->moeRefusal(lay);
  if (why) *why = no;
  if (!no.empty()) return MoeRoute::Composed;
  return cs.info.device.type == DeviceSpec::CPU ? MoeRoute::Host : MoeRoute::Kernels;
}

}  // namespace cclx
