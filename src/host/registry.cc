// The host backend's objects: one per line of the algorithm catalogue (core/select/algorithms.def)
// that names a host factory; the factories are defined in src/host/algos, one file each.
#include "host/algos/algos.h"

namespace cclx {

// A line whose algorithm the host backend runs without an object of its own.
static std::unique_ptr<HostAlgo> noHost() { return nullptr; }

#define CCLX_ALGO(...)
#define CCLX_SERVES(id, colls, device, host) std::unique_ptr<HostAlgo> host();
#include "core/select/algorithms.def"
#undef CCLX_SERVES

namespace {

#define CCLX_SERVES(id, colls, device, host) {Algo::id, colls, &host},
const AlgoSet<HostAlgo>::Binding kHostBindings[] = {
#include "core/select/algorithms.def"
};
#undef CCLX_SERVES
#undef CCLX_ALGO

}  // namespace

AlgoSet<HostAlgo> makeHostAlgorithms() { return AlgoSet<HostAlgo>(kHostBindings); }

}  // namespace cclx
