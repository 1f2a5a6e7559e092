// The check of all_to_all_v_device's split sizes over every rank, for the backends that see the
// counts of every rank on the host before moving anything (the host backend, the GPU backend's
// NCCL path): every rank publishes one record, every rank checks all of them in the same order,
// so every rank reaches the same verdict and the same message (the peer-memory kernel checks on
// the device instead: gpu/dda/xchg_dev.cu). Plain C++, header only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/comm/backend.h"

namespace cclx {

/// int64 words of one rank's record: sendRows[size], recvRows[size], sendCap, recvCap.
inline size_t deviceRowsRecordLen(int size) { return 2 * size_t(size) + 2; }

/// This rank's record of `a` (AllToAllVDevice) from host copies of its split sizes.
inline std::vector<int64_t> deviceRowsRecord(const CollArgs& a, const int64_t* sendRows,
                                             const int64_t* recvRows, int size) {
  std::vector<int64_t> rec(deviceRowsRecordLen(size));
  for (int i = 0; i < size; ++i) {
    rec[size_t(i)] = sendRows[i];
    rec[size_t(size + i)] = recvRows[i];
  }
  rec[2 * size_t(size)] = int64_t(a.rows.sendCap);
  rec[2 * size_t(size) + 1] = int64_t(a.rows.recvCap);
  return rec;
}

/// Checks every rank's record (rank r's at all + r * deviceRowsRecordLen(size)): every split size
/// >= 0, each side's sizes summing to at most its capacity (rows), and rank q's receive size for
/// p equal to rank p's send size for q. Returns "" when the call can run, else the message of the
/// first violation in rank order, naming the ranks.
inline std::string deviceRowsError(const int64_t* all, int size) {
  const size_t len = deviceRowsRecordLen(size), n = size_t(size);
  for (size_t p = 0; p < n; ++p) {
    const int64_t* rec = all + p * len;
    for (int side = 0; side < 2; ++side) {
      const int64_t* rows = rec + size_t(side) * n;
      const uint64_t cap = uint64_t(rec[2 * n + size_t(side)]);
      const char* what = side == 0 ? "input" : "output";
      uint64_t sum = 0;
      for (size_t q = 0; q < n; ++q) {
        if (rows[q] < 0)
          return strFormat("all_to_all_v_device: rank %zu's %s split size for rank %zu is "
                           "negative (%lld)", p, what, q, (long long)rows[q]);
        sum += uint64_t(rows[q]) > cap ? cap + 1 : uint64_t(rows[q]);  // no overflow
        if (sum > cap)
          return strFormat("all_to_all_v_device: rank %zu's %s split sizes sum beyond the %llu "
                           "rows its %s holds", p, what, (unsigned long long)cap, what);
      }
    }
  }
  for (size_t p = 0; p < n; ++p)
    for (size_t q = 0; q < n; ++q) {
      const int64_t sent = all[p * len + q], expected = all[q * len + n + p];
      if (sent != expected)
        return strFormat("all_to_all_v_device: rank %zu sends %lld rows to rank %zu, which "
                         "expects %lld (split sizes disagree)", p, (long long)sent, q,
                         (long long)expected);
    }
  return "";
}

}  // namespace cclx
