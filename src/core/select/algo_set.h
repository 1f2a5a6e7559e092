// One backend's algorithm objects, made from the catalogue (algorithms.def) and looked up by
// (collective, algorithm); the loop both backends build a call's capabilities with. A backend
// gives the factories it names (its registry: src/gpu/registry, src/host/registry.cc); Obj is
// its algorithm interface (DeviceAlgo, HostAlgo), which answers canRun(args, ctx).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "base/error.h"
#include "core/comm/backend.h"
#include "core/select/select.h"

namespace cclx {

template <class Obj>
class AlgoSet {
 public:
  /// One CCLX_SERVES line of algorithms.def with this backend's factory (nullptr: none here).
  struct Binding {
    Algo algo;
    CollSet colls;
    std::unique_ptr<Obj> (*make)();
  };

  explicit AlgoSet(std::span<const Binding> bindings) {
    for (const Binding& b : bindings) {
      std::unique_ptr<Obj> o = b.make ? b.make() : nullptr;
      if (o) slots_.push_back(Slot{b.algo, b.colls, std::move(o)});
    }
  }

  /// The object that runs `algo` for collective `t` (runsAs: a lowered call's collective);
  /// nullptr where this backend has none (NCCL, the unfused sequence).
  Obj* find(CollType t, Algo algo) const {
    const CollSet bit = collBit(runsAs(t, algo));
    for (const Slot& s : slots_)
      if (s.algo == algo && (s.colls & bit)) return s.obj.get();
    return nullptr;
  }

  /// The capability loop: in `c`, allows every algorithm with an object for `a`'s collective
  /// whose object accepts the call as that algorithm runs it (lowerFor); kLowPrecision rows are
  /// asked only when that call wants low precision. `accepts(obj, args)` is the backend's test.
  template <class Accepts>
  void allow(Caps& c, const CollArgs& a, const Config& cfg, Accepts&& accepts) const {
    const CollSet bit = collBit(a.type);
    for (const Slot& s : slots_) {
      if (!(s.colls & bit)) continue;
      const bool lowered = runsAs(a.type, s.algo) != a.type;
      const CollArgs b = lowered ? lowerFor(a, s.algo) : CollArgs{};
      const CollArgs& call = lowered ? b : a;
      const bool asked = !(row(s.algo).flags & kLowPrecision) || lowPrecisionWanted(call, cfg);
      c.allow(s.algo, asked && accepts(*s.obj, call));
    }
  }

 private:
  struct Slot {
    Algo algo;
    CollSet colls;
    std::unique_ptr<Obj> obj;
  };
  std::vector<Slot> slots_;
};

}  // namespace cclx
