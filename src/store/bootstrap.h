// Rendezvous helpers on a store (below core: they know the store and the public types only): every
// rank's record, waits that name the missing ranks, failures posted for the others, host
// identities, per-comm key prefixes. A comm's rendezvous itself is core/comm/rendezvous.cc.
#pragma once

#include <cclx/cclx.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace cclx {

/// Every rank publishes `value` under "<key>/<rank>" in `store` and returns all ranks' values.
/// A rank that does not arrive within `timeout` makes the others fail with cclxTimeout naming
/// the missing ranks ("<what>: rank(s) 3, 5 did not arrive within 2000 ms").
std::vector<std::string> storeAllGather(Store& store, const std::string& key,
                                        const std::string& value, int rank, int size,
                                        std::chrono::milliseconds timeout, const std::string& what);

/// Waits for "<key>/<r>" for every r in `ranks`; cclxTimeout names the ranks that never wrote.
/// `store` is a comm's namespace: a failure another rank posted there (postFailure) ends the wait
/// at once with that rank's error; losing the store ends it with cclxTimeout naming rank 0 (the
/// store's owner). Every `reportEvery` it logs a WARN line naming the ranks still missing.
void storeWaitRanks(Store& store, const std::string& key, const std::vector<int>& ranks,
                    std::chrono::milliseconds timeout, const std::string& what,
                    std::chrono::milliseconds reportEvery = std::chrono::seconds(10));

/// A rank that fails to create a comm (bad setting, bad device, a peer's failure, a timeout)
/// tells the others through the comm's namespace: the first failure is posted under "failed"
/// ("<code>|<rank>|<message>"), and every failed rank acknowledges under "failed_ack/<rank>".
/// The process that serves the store then waits, at most min(timeout, 10 s), until every other
/// rank has acknowledged (only ranks that arrived, unless `awaitAbsent`: a failure at the start,
/// when slower ranks may still be connecting), so that none loses the store before it has read
/// the error. Never throws; a store that cannot be reached is skipped.
void postFailure(Store& commStore, int rank, int size, const Error& e,
                 std::chrono::milliseconds timeout, bool awaitAbsent);

/// The error another rank posted in `commStore` (see postFailure), thrown as "rank R failed: ..."
/// (cclxTimeout for a timeout, else cclxRemoteError); returns when there is none or it is ours.
void throwPostedFailure(Store& commStore, int rank);

/// Facts of the TCP store under `s` (through prefix views): its address ("host:port", empty for
/// other stores), whether this process serves it, and how many clients it has (-1 unknown).
struct StoreFacts {
  std::string address;
  bool serving = false;
  int clients = -1;
  const void* id = nullptr;  // identifies the TCP store (null for other stores)
};
StoreFacts storeFacts(const Store& s);

/// Key prefix for the next comm called `name` made by this process: "<name>/<k>/".
std::string nextCommPrefix(const std::string& name);

/// This host's identity: hostname plus the kernel boot id.
std::string hostIdentity();

}  // namespace cclx
