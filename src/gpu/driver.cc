// The CUDA driver's functions (driver.h).
#include "gpu/driver.h"

#if !defined(CCLX_HAVE_HIP)
#include "base/error.h"
#include "gpu/runtime.h"

namespace cclx {

namespace {

template <typename Fn>
bool entry(Fn& fn, const char* name) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !f) {
    (void)cudaGetLastError();
    return false;
  }
  fn = reinterpret_cast<Fn>(f);
  return true;
}

}  // namespace

const CuDriver& cuDriver() {
  static const CuDriver d = [] {
    CuDriver x;
    x.ok = entry(x.errorName, "cuGetErrorName") & entry(x.deviceGet, "cuDeviceGet") &
           entry(x.attribute, "cuDeviceGetAttribute") &
           entry(x.pointerAttribute, "cuPointerGetAttribute") &
           entry(x.addressRange, "cuMemGetAddressRange") &
           entry(x.granularity, "cuMemGetAllocationGranularity") &
           entry(x.create, "cuMemCreate") & entry(x.release, "cuMemRelease") &
           entry(x.retain, "cuMemRetainAllocationHandle") &
           entry(x.properties, "cuMemGetAllocationPropertiesFromHandle") &
           entry(x.exportHandle, "cuMemExportToShareableHandle") &
           entry(x.importHandle, "cuMemImportFromShareableHandle") &
           entry(x.reserve, "cuMemAddressReserve") & entry(x.addressFree, "cuMemAddressFree") &
           entry(x.map, "cuMemMap") & entry(x.unmap, "cuMemUnmap") &
           entry(x.setAccess, "cuMemSetAccess");
    return x;
  }();
  return d;
}

std::string cuErrorName(CUresult r) {
  const char* s = nullptr;
  if (cuDriver().errorName && cuDriver().errorName(r, &s) == CUDA_SUCCESS && s) return s;
  return strFormat("CUDA driver error %d", int(r));
}

}  // namespace cclx

#endif
