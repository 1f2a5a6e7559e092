// The CUDA driver functions cclx calls (virtual memory management, pointer queries), reached
// through the runtime's entry-point query as of CUDA 12.0's ABI: libcclx does not link libcuda.
// CUDA builds only (HIP builds use the HIP runtime's own functions).
#pragma once

#if !defined(CCLX_HAVE_HIP)
#include <cuda.h>

#include <string>

namespace cclx {

struct CuDriver {
  decltype(&::cuGetErrorName) errorName = nullptr;
  decltype(&::cuDeviceGet) deviceGet = nullptr;
  decltype(&::cuDeviceGetAttribute) attribute = nullptr;
  decltype(&::cuPointerGetAttribute) pointerAttribute = nullptr;
  decltype(&::cuMemGetAddressRange) addressRange = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemRetainAllocationHandle) retain = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) properties = nullptr;
  decltype(&::cuMemExportToShareableHandle) exportHandle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) importHandle = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) addressFree = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) setAccess = nullptr;
  /// Every function above is there (each one may still be null when this is false).
  bool ok = false;
};

/// The driver's functions, looked up once per process.
const CuDriver& cuDriver();
/// The driver's name for r ("CUDA_ERROR_INVALID_VALUE"), or its number.
std::string cuErrorName(CUresult r);

}  // namespace cclx

/// Throws cclxCudaError naming the call and the driver's error unless it returns CUDA_SUCCESS.
#define CCLX_CU_CHECK(call)                                                                   \
  do {                                                                                        \
    const CUresult r_ = (call);                                                               \
    if (r_ != CUDA_SUCCESS)                                                                   \
      CCLX_THROW(cclxCudaError, "%s failed: %s", #call, ::cclx::cuErrorName(r_).c_str());      \
  } while (0)

#endif
