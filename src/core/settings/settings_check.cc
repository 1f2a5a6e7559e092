// Settings every rank of a comm must share (see settings_check.h).
#include "core/settings/settings_check.h"

#include <map>

#include "base/error.h"

namespace cclx {

namespace {

std::string b(bool v) { return v ? "1" : "0"; }
std::string n(uint64_t v) { return std::to_string(v); }

std::string forwardList(unsigned mask) {
  std::string s;
  const std::pair<unsigned, const char*> names[] = {{kForwardAllReduce, "allreduce"},
                                                    {kForwardAllGather, "allgather"},
                                                    {kForwardReduceScatter, "reducescatter"},
                                                    {kForwardAllToAll, "alltoall"}};
  for (const auto& [bit, name] : names) {
    if (!(mask & bit)) continue;
    if (!s.empty()) s += ',';
    s += name;
  }
  return s.empty() ? "none" : s;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) {
    if (!s.empty()) s += ", ";
    s += std::to_string(r);
  }
  return s;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> layoutSettings(const Config& c,
                                                                SettingsScope scope) {
  std::vector<std::pair<std::string, std::string>> s;
  // Choices every rank makes alike (core/select/select.cc) and the FP8 wire format (both transports).
  if (scope != SettingsScope::kDropin) s.emplace_back("CCLX_CHECK_MODE", b(c.checkMode));
  s.emplace_back("CCLX_ALLREDUCE_ALGO", c.allreduceAlgo);
  s.emplace_back("CCLX_LOW_PRECISION_ALLREDUCE", b(c.lpAllReduce));
  s.emplace_back("CCLX_LOW_PRECISION_ALLGATHER", b(c.lpAllGather));
  s.emplace_back("CCLX_LOW_PRECISION_REDUCESCATTER", b(c.lpReduceScatter));
  s.emplace_back("CCLX_LOW_PRECISION_ALLTOALL", b(c.lpAllToAll));
  s.emplace_back("CCLX_LOW_PRECISION_MIN_BYTES", n(c.lpMinBytes));
  s.emplace_back("CCLX_FP8_BLOCK_SIZE", n(uint64_t(c.fp8BlockSize)));
  s.emplace_back("CCLX_FP8_ALLREDUCE_ALGO", c.fp8AllReduceAlgo);
  s.emplace_back("CCLX_FP8_ONESHOT_MAX_BYTES", n(c.fp8OneShotMaxBytes));
  s.emplace_back("CCLX_FUSED_ALGO", c.fusedAlgo);
  s.emplace_back("CCLX_FUSED_ONESHOT_MAX_BYTES", n(c.fusedOneShotMaxBytes));
  s.emplace_back("CCLX_FUSED_TWOSHOT_MAX_BYTES", n(c.fusedTwoShotMaxBytes));
  if (scope == SettingsScope::kHost) {
    s.emplace_back("CCLX_SHM_CHUNK_BYTES", n(c.shmChunkBytes));
    s.emplace_back("CCLX_SHM_FLAT_MAX_BYTES", n(c.shmFlatMaxBytes));
    return s;
  }
  // Peer memory: the staging layout, the grids that index per-block slots and flags, thresholds.
  s.emplace_back("CCLX_DDA_ENABLE", b(c.ddaEnable));
  s.emplace_back("CCLX_DDA_STAGING_BYTES", n(c.ddaStagingBytes));
  s.emplace_back("CCLX_DDA_MAX_BLOCKS", n(uint64_t(c.ddaMaxBlocks)));
  s.emplace_back("CCLX_DDA_FLAT_MAX_BYTES", n(c.ddaFlatMaxBytes));
  s.emplace_back("CCLX_DDA_LAMPORT_MAX_BYTES", n(c.ddaLamportMaxBytes));
  s.emplace_back("CCLX_DDA_TREE_MAX_BYTES", n(c.ddaTreeMaxBytes));
  s.emplace_back("CCLX_DDA_ALLGATHER_MAX_BYTES", n(c.ddaAllGatherMaxBytes));
  s.emplace_back("CCLX_DDA_REDUCESCATTER_MAX_BYTES", n(c.ddaReduceScatterMaxBytes));
  s.emplace_back("CCLX_DDA_ALLTOALL_MAX_BYTES", n(c.ddaAllToAllMaxBytes));
  s.emplace_back("CCLX_FUSED_STAGING_BYTES", n(c.fusedStagingBytes));
  s.emplace_back("CCLX_FP8_TILES_PER_CTA", n(uint64_t(c.fp8TilesPerCta)));
  if (scope == SettingsScope::kDropin) {
    s.emplace_back("CCLX_NCCL_INTERCEPT", b(c.ncclIntercept));
    s.emplace_back("CCLX_NCCL_FORWARD", forwardList(c.ncclForward));
  }
  return s;
}

std::string encodeSettings(const std::vector<std::pair<std::string, std::string>>& s) {
  std::string out;
  for (const auto& [k, v] : s) out += k + "=" + v + "\n";
  return out;
}

std::string compareSettings(const std::vector<std::string>& records) {
  // name -> value -> ranks, in the order the names first appear.
  std::vector<std::string> order;
  std::map<std::string, std::map<std::string, std::vector<int>>> seen;
  std::vector<int> malformed;
  for (size_t r = 0; r < records.size(); ++r) {
    const std::string& rec = records[r];
    std::map<std::string, std::string> mine;
    bool ok = true;
    for (size_t at = 0; at < rec.size();) {
      size_t nl = rec.find('\n', at);
      if (nl == std::string::npos) nl = rec.size();
      const std::string line = rec.substr(at, nl - at);
      at = nl + 1;
      const size_t eq = line.find('=');
      if (eq == std::string::npos || eq == 0) {
        ok = false;
        break;
      }
      mine[line.substr(0, eq)] = line.substr(eq + 1);
    }
    if (!ok) {
      malformed.push_back(int(r));
      continue;
    }
    for (const auto& [k, v] : mine) {
      if (!seen.count(k)) order.push_back(k);
      seen[k][v].push_back(int(r));
    }
  }
  std::string msg;
  if (!malformed.empty())
    msg = strFormat("rank(s) %s sent a malformed settings record", rankList(malformed).c_str());
  const int valid = int(records.size() - malformed.size());
  for (const std::string& k : order) {
    auto& values = seen[k];
    size_t holders = 0;
    for (const auto& [v, ranks] : values) holders += ranks.size();
    if (values.size() == 1 && int(holders) == valid) continue;
    std::string line = k + " differs:";
    bool first = true;
    for (const auto& [v, ranks] : values) {
      line += strFormat("%s %s on rank(s) %s", first ? "" : ";", v.c_str(),
                        rankList(ranks).c_str());
      first = false;
    }
    if (int(holders) < valid) line += "; unset on the other rank(s) (an older cclx?)";
    if (!msg.empty()) msg += "; ";
    msg += line;
  }
  return msg;
}

}  // namespace cclx
