// The settings every rank of a comm must share: those that define a memory layout another rank
// writes into (staging sizes, grids, FP8 blocks and tiles) or a choice every rank must make alike
// (size thresholds, algorithm names, low-precision switches, the drop-in's intercept and forward
// masks). Each rank publishes them at setup (the store for a Comm, the first setup exchange for
// GPU peer memory and the NCCL drop-in); a mismatch fails setup on every rank with a message that
// names each setting and which ranks hold which value, before any shared memory is touched.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/settings/config.h"

namespace cclx {

/// Which settings matter: a CPU comm (host transport), a GPU comm (peer memory and its kernels),
/// or the NCCL drop-in (the GPU settings plus its intercept and forward masks).
enum class SettingsScope { kHost, kGpu, kDropin };

/// (name, value) of every setting of `scope`, in a fixed order. (The GPU's SM count, which sets
/// some grids, is not a setting: peer-memory setup agrees on the smallest, gpu/peer_mem.h.)
std::vector<std::pair<std::string, std::string>> layoutSettings(const Config& cfg,
                                                                SettingsScope scope);

/// The settings as one record ("name=value" lines).
std::string encodeSettings(const std::vector<std::pair<std::string, std::string>>& s);

/// Compares every rank's record (index = rank): "" when all agree, else one sentence per
/// differing setting ("CCLX_DDA_STAGING_BYTES differs: 184549376 on rank(s) 0, 2; 1048576 on
/// rank(s) 1"). A record that cannot be parsed is reported as such.
std::string compareSettings(const std::vector<std::string>& records);

}  // namespace cclx
