// Comm settings that change after creation (timeout, hints) and the backend version a comm
// reports.
#include <cclx/nccl_info.h>

#include "core/comm/comm_internal.h"
#include "core/settings/table.h"
#include "base/error.h"
#include "base/log.h"

namespace cclx {

void Comm::setTimeout(std::chrono::milliseconds timeout) {
  CCLX_ARG_CHECK(timeout.count() > 0, "setTimeout: the timeout must be positive (got %lld ms)",
                 (long long)timeout.count());
  st_->info.opts.timeout = timeout;
  CCLX_INFO("comm '%s': timeout %lld ms", name().c_str(), (long long)timeout.count());
}

void Comm::setHints(const std::map<std::string, std::string>& hints) {
  settings::checkHints(hints);  // a bad key or value throws with the comm's hints unchanged
  st_->info.opts.hints = hints;
}

void Comm::updateHints(const std::map<std::string, std::string>& hints) {
  settings::checkHints(hints);
  for (const auto& [k, v] : hints) st_->info.opts.hints[k] = v;
  CCLX_INFO("comm '%s': %zu hint(s) updated", name().c_str(), hints.size());
}

std::string Comm::backendVersion() const {
  std::string v = strFormat("cclx %d.%d.%d", CCLX_MAJOR, CCLX_MINOR, CCLX_PATCH);
  if (device().type == DeviceSpec::CUDA) {
    const int n = ncclRuntimeVersion();
    if (n > 0) v += strFormat(" NCCL %d.%d.%d", n / 10000, (n / 100) % 100, n % 100);
  }
  return v;
}

}  // namespace cclx
