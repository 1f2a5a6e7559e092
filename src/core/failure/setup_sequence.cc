// One rank's side of a setup sequence (see setup_sequence.h).
//
// Record format: "1" + the body when the rank is well; "0" + its result code + ":" + why when it
// failed (the message already names the rank).
#include "core/failure/setup_sequence.h"

#include <cstdlib>
#include <cstring>

namespace cclx {

void SetupSequence::fail(cclxResult_t code, const std::string& why) {
  if (failed_) return;
  failed_ = true;
  code_ = code == cclxSuccess ? cclxInternalError : code;
  why_ = why;
}

// `msg` naming this rank once: prefixed with "rank N: " unless it already starts so.
std::string SetupSequence::namingRank(const std::string& msg) const {
  const std::string prefix = strFormat("rank %d: ", rank_);
  return msg.rfind(prefix, 0) == 0 ? msg : prefix + msg;
}

std::optional<std::vector<std::string>> SetupSequence::step(
    const std::string& tag, const std::function<std::string()>& local) {
  ++steps_;
  std::string body;
  if (!failed_) {
    try {
      body = local();
    } catch (const Error& e) {
      fail(e.code(), namingRank(e.what()));
    } catch (const std::exception& e) {
      fail(cclxInternalError, namingRank(e.what()));
    }
  }
  std::string rec(1, failed_ ? '0' : '1');
  if (failed_) {
    rec += std::to_string(int(code_));
    rec += ':';
    rec += why_;
  } else {
    rec += body;
  }
  if (broken_) {
    ex_.contribute(tag, rec);
    return std::nullopt;
  }
  std::vector<std::string> all;
  try {
    all = ex_.allGather(tag, rec);
  } catch (const Error& e) {
    broken_ = true;
    fail(e.code(), strFormat("rank %d: setup exchange '%s': %s", rank_, tag.c_str(), e.what()));
    return std::nullopt;
  } catch (const std::exception& e) {
    broken_ = true;
    fail(cclxInternalError,
         strFormat("rank %d: setup exchange '%s': %s", rank_, tag.c_str(), e.what()));
    return std::nullopt;
  }
  if (int(all.size()) != size_) {
    fail(cclxInternalError, strFormat("rank %d: setup exchange '%s' returned %zu records for %d "
                                      "ranks", rank_, tag.c_str(), all.size(), size_));
    return std::nullopt;
  }
  // Every rank that completes this exchange sees these records: the verdict below is theirs too.
  std::string peers;
  int npeers = 0;
  std::vector<std::string> bodies(all.size());
  for (int r = 0; r < size_; ++r) {
    const std::string& v = all[size_t(r)];
    if (!v.empty() && v[0] == '1') {
      bodies[size_t(r)] = v.substr(1);
      continue;
    }
    std::string why = strFormat("rank %d sent a malformed setup record", r);
    if (!v.empty() && v[0] == '0') {
      const size_t colon = v.find(':');
      if (colon != std::string::npos) why = v.substr(colon + 1);
    }
    if (r == rank_) continue;  // this rank's own failure is already recorded
    if (++npeers > 4) continue;
    if (!peers.empty()) peers += "; ";
    peers += strFormat("rank %d failed: %s", r, why.c_str());
  }
  if (npeers > 4) peers += strFormat("; and %d more rank(s)", npeers - 4);
  if (npeers) fail(cclxRemoteError, peers);
  if (failed_) return std::nullopt;
  return bodies;
}

void injectSetupFailure(const Config& cfg, int rank, const char* stage) {
  if (cfg.testSetupFailRank != rank || cfg.testSetupFailStage != stage) return;
  CCLX_THROW(cclxInternalError, "setup failure injected at stage '%s' (CCLX_TEST_SETUP_FAIL=%d:%s)",
             stage, rank, stage);
}

}  // namespace cclx
