// The host backend's objects: one per line of the algorithm catalogue (core/select/algorithms.def)
// that names a host factory; the factories are defined in src/host/algos, one file each.
#include "host/algos/algos.h"

namespace cclx {

#define CCLX_BIND_OBJ HostAlgo
#define CCLX_BIND_FACTORY(device, host) host
#define CCLX_BIND_MAKE makeHostAlgorithms
#include "core/select/algo_bindings.inc"

}  // namespace cclx
