// The GPU backend's algorithm objects: one DeviceAlgo (gpu/algo.h: eligibility, staging regions,
// launch) per line of the algorithm catalogue (core/select/algorithms.def) that names a device
// factory. A comm makes its own set; a call's capabilities are the objects of its collective that
// accept it and whose staging did not fail to allocate (AlgoSet::allow), and the algorithm
// select() returns runs on the object of (collective, algorithm). Adding a GPU algorithm is its
// kernel file (with its factory), its CPU twin and its catalogue row, plus at most one selection
// rule (docs/design/selection.md, "Adding an algorithm"): nothing here changes. Plain C++.
#pragma once

#include "core/select/algo_set.h"
#include "gpu/algo.h"

namespace cclx {

/// One object per catalogue line with a device factory.
AlgoSet<DeviceAlgo> makeDeviceAlgorithms();

}  // namespace cclx
