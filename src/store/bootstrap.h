// Rendezvous: establishes who is where (ranks per host) and a per-comm namespace in the store.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"

namespace cclx {

/// Every rank publishes `value` under "<key>/<rank>" in `store` and returns all ranks' values.
/// A rank that does not arrive within `timeout` makes the others fail with cclxTimeout naming
/// the missing ranks ("<what>: rank(s) 3, 5 did not arrive within 2000 ms").
std::vector<std::string> storeAllGather(Store& store, const std::string& key,
                                        const std::string& value, int rank, int size,
                                        std::chrono::milliseconds timeout, const std::string& what);

/// Waits for "<key>/<r>" for every r in `ranks`; cclxTimeout names the ranks that never wrote.
void storeWaitRanks(Store& store, const std::string& key, const std::vector<int>& ranks,
                    std::chrono::milliseconds timeout, const std::string& what);

/// Runs the rendezvous of a new comm whose keys live under `prefix` in `rootStore`.
/// opts.timeout must already be resolved (config override applied).
BootstrapInfo bootstrap(DeviceSpec device, const Options& opts, std::shared_ptr<Store> rootStore,
                        const std::string& prefix, int rank, int size);

/// Key prefix for the next comm called `name` made by this process: "<name>/<k>/".
std::string nextCommPrefix(const std::string& name);

/// This host's identity: hostname plus the kernel boot id.
std::string hostIdentity();

}  // namespace cclx
