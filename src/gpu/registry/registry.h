// The GPU algorithm registry: every peer-memory algorithm once, as the algorithm select() names
// (core/select/select.h), the collectives it runs and the factory of its DeviceAlgo (gpu/algo.h:
// eligibility, staging regions, launch). The backend makes one object per entry; a call's
// capabilities (Caps) are the entries of its collective that accept it and whose staging did not
// fail to allocate, and the algorithm select() returns runs on the entry of (collective,
// algorithm). Adding a kernel is its file plus one entry in registry.cc. Plain C++.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/select/select.h"
#include "gpu/algo.h"

namespace cclx {

/// A set of collectives (bit t: CollType t).
constexpr uint32_t collBit(CollType t) { return 1u << int(t); }

struct AlgoEntry {
  Algo algo;                         // what select() returns for it (never Base or RmsUnfused)
  uint32_t colls;                    // the collectives it runs (collBit)
  bool lowPrecision;                 // FP8: asked only when the call wants low precision
  std::unique_ptr<DeviceAlgo> (*make)();
};

/// Every entry; at most one per (collective, algorithm).
std::span<const AlgoEntry> algoRegistry();

/// The objects of a comm, one per registry entry.
class AlgoTable {
 public:
  AlgoTable();
  /// The object that runs `algo` for collective `t`; nullptr for Base, RmsUnfused or a pair the
  /// registry does not hold.
  DeviceAlgo* find(CollType t, Algo algo) const;
  /// Calls f(entry, object) for every entry of collective `t`.
  template <class F>
  void forEach(CollType t, F&& f) const {
    const std::span<const AlgoEntry> reg = algoRegistry();
    for (size_t i = 0; i < reg.size(); ++i)
      if (reg[i].colls & collBit(t)) f(reg[i], *objs_[i]);
  }

 private:
  std::vector<std::unique_ptr<DeviceAlgo>> objs_;  // [i]: entry i's object
};

}  // namespace cclx
