// Every kernel launch of src/gpu, written once (host code of a .cu file): the launch sits in the
// scope of a gpurt::LaunchCheck (gpu/resources.h), so an error of this launch is cleared and
// thrown under the kernel's name, and an error that was already pending on the thread (the
// application's) is neither reported as the launch's nor cleared.
// tests/python/api/test_kernel_launches.py fails on any launch in src/gpu outside such a scope.
#pragma once

#include <utility>

#include "gpu/resources.h"
#include "gpu/runtime.h"

namespace cclx {
namespace dev {

/// Launches kernel<<<grid, block, 0, stream>>>(args...); throws cclxCudaError naming `what` when
/// the launch itself fails.
template <class... P, class... A>
void launchKernel(const char* what, void (*kernel)(P...), dim3 grid, dim3 block, void* stream,
                  A&&... args) {
  const gpurt::LaunchCheck launched;
  kernel<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(std::forward<A>(args)...);
  launched.check(what);
}

}  // namespace dev
}  // namespace cclx
