// Export and import of cuMem allocations by POSIX file descriptor (see vmm.h), with the driver's
// virtual memory management functions (gpu/driver.h).
#include "gpu/window/vmm.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "base/error.h"
#include "base/log.h"
#include "gpu/driver.h"
#include "gpu/runtime.h"

#if !defined(CCLX_HAVE_HIP)
#include <nvtx3/nvToolsExt.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>
#endif

namespace cclx {

const std::string& vmmProcessId() {
  static const std::string id = [] {
    uint64_t r = 0;
    try {
      std::random_device rd;
      r = (uint64_t(rd()) << 32) ^ uint64_t(rd());
    } catch (const std::exception&) {
      r = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    }
    return strFormat("%d.%016llx", int(getpid()), static_cast<unsigned long long>(r));
  }();
  return id;
}

#if defined(CCLX_HAVE_HIP)

bool vmmExport(const void*, VmmExport*) { return false; }

char* vmmImport(int fd, size_t, int) {
  if (fd >= 0) close(fd);
  CCLX_THROW(cclxUnsupported, "importing cuMem allocations by file descriptor is not supported "
                              "with HIP");
}

void vmmClose(char*, size_t) {}

void markPeerMemoryInitialized(const void*, size_t) {}

char* vmmOpen(const std::string&, int fd, size_t size, int device) {
  return vmmImport(fd, size, device);
}

void vmmRelease(const std::string&, int) {}

#else

namespace {

// Releases a retained or imported allocation handle at scope exit.
struct HandleRef {
  CUmemGenericAllocationHandle h = 0;
  bool held = false;
  ~HandleRef() {
    if (!held) return;
    const CUresult r = cuDriver().release(h);
    if (r != CUDA_SUCCESS) CCLX_WARN("cuMemRelease: %s", cuErrorName(r).c_str());
  }
};

}  // namespace

bool vmmExport(const void* ptr, VmmExport* out) {
  const CuDriver& d = cuDriver();
  if (!d.ok) return false;  // no VMM in this driver: no memory of that kind either
  // cudaMalloc memory (legacy CUDA IPC capable) is never a cuMem mapping: answered without the
  // retain below, whose failure on such memory is an API error in the tools' reports.
  int legacy = 0;
  if (d.pointerAttribute &&
      d.pointerAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                         reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS &&
      legacy)
    return false;
  HandleRef h;
  // Fails (and changes nothing) for memory that no cuMemMap mapped: pool memory and the like.
  if (d.retain(&h.h, const_cast<void*>(ptr)) != CUDA_SUCCESS) return false;
  h.held = true;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUresult r = d.addressRange(&base, &size, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS)
    CCLX_THROW(cclxCudaError, "cuMemGetAddressRange of the cuMem buffer %p failed: %s", ptr,
               cuErrorName(r).c_str());
  CUmemAllocationProp prop = {};
  r = d.properties(&prop, h.h);
  if (r != CUDA_SUCCESS)
    CCLX_THROW(cclxCudaError, "cuMemGetAllocationPropertiesFromHandle for the buffer %p failed: %s",
               ptr, cuErrorName(r).c_str());
  if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0)
    CCLX_THROW(cclxInvalidArgument,
               "the buffer %p lies in memory of CUDA's virtual memory management API (cuMemCreate "
               "or a memory pool) created without POSIX file-descriptor export, which other "
               "processes cannot map: create it with requestedHandleTypes = "
               "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, e.g. with cclx::memAlloc / "
               "cclxMemAlloc / torch.cuda.MemPool(cclx.get_mem_allocator()) or ncclMemAlloc",
               ptr);
  unsigned long long id = 0;
  static std::atomic<unsigned long long> unshared{0};
  std::string idText;
  if (d.pointerAttribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, base) == CUDA_SUCCESS)
    idText = strFormat("b%llx", id);
  else
    idText = strFormat("u%llx", ++unshared);
  int fd = -1;
  r = d.exportHandle(&fd, h.h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS || fd < 0)
    CCLX_THROW(cclxCudaError,
               "cuMemExportToShareableHandle (POSIX file descriptor) for the buffer %p failed: %s",
               ptr, cuErrorName(r).c_str());
  out->base = reinterpret_cast<char*>(base);
  out->size = size;
  out->offset = size_t(static_cast<const char*>(ptr) - out->base);
  out->fd = fd;
  out->key = strFormat("%s.%llx.%s", vmmProcessId().c_str(), static_cast<unsigned long long>(base),
                       idText.c_str());
  return true;
}

char* vmmImport(int fd, size_t size, int device) {
  const CuDriver& d = cuDriver();
  if (!d.ok || size == 0) {
    close(fd);
    CCLX_REQUIRE(d.ok, cclxUnsupported, "the CUDA driver lacks the virtual memory management API");
    CCLX_THROW(cclxInvalidArgument, "a peer published an empty cuMem allocation");
  }
  HandleRef h;  // released on return: a mapping keeps the memory
  CUdeviceptr va = 0;
  bool mapped = false;
  const char* step = "cuMemImportFromShareableHandle";
  CUresult r = d.importHandle(&h.h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  close(fd);  // the imported handle stands for the allocation now
  if (r == CUDA_SUCCESS) {
    h.held = true;
    // Reserve at the allocation's own granularity (0, the default, where it is unknown).
    size_t align = 0;
    CUmemAllocationProp prop = {};
    if (d.properties(&prop, h.h) != CUDA_SUCCESS ||
        d.granularity(&align, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
        (align & (align - 1)) != 0)
      align = 0;
    step = "cuMemAddressReserve";
    r = d.reserve(&va, size, align, 0, 0);
  }
  if (r == CUDA_SUCCESS) {
    step = "cuMemMap";
    r = d.map(va, size, 0, h.h, 0);
    mapped = r == CUDA_SUCCESS;
  }
  if (r == CUDA_SUCCESS) {
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    step = "cuMemSetAccess";
    r = d.setAccess(va, size, &access, 1);
  }
  if (r != CUDA_SUCCESS) {
    if (mapped && d.unmap(va, size) != CUDA_SUCCESS) CCLX_WARN("cuMemUnmap failed while undoing");
    if (va && d.addressFree(va, size) != CUDA_SUCCESS)
      CCLX_WARN("cuMemAddressFree failed while undoing");
    CCLX_THROW(cclxCudaError,
               "mapping a peer's cuMem allocation (%zu bytes) on cuda:%d: %s failed: %s", size,
               device, step, cuErrorName(r).c_str());
  }
  markPeerMemoryInitialized(reinterpret_cast<void*>(va), size);
  return reinterpret_cast<char*>(va);
}

void markPeerMemoryInitialized(const void* p, size_t bytes) {
  if (!p || bytes == 0) return;
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("cclx");
  nvtxMemVirtualRangeDesc_t range = {};
  range.ptr = p;
  range.size = bytes;
  nvtxMemMarkInitializedBatch_t batch = {};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof(batch);
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.regionDescCount = 1;
  batch.regionDescElementSize = sizeof(range);
  batch.regionDescElements = &range;
  nvtxMemCudaMarkInitialized(domain, nullptr, 0, &batch);
}

void vmmClose(char* base, size_t size) {
  const CuDriver& d = cuDriver();
  if (!base || !d.ok) return;
  const CUdeviceptr va = reinterpret_cast<CUdeviceptr>(base);
  CUresult r = d.unmap(va, size);
  if (r != CUDA_SUCCESS) {
    CCLX_WARN("cuMemUnmap(%p, %zu) failed: %s", static_cast<void*>(base), size,
              cuErrorName(r).c_str());
    return;  // the range stays reserved: freeing it while mapped would fail too
  }
  r = d.addressFree(va, size);
  if (r != CUDA_SUCCESS)
    CCLX_WARN("cuMemAddressFree(%p, %zu) failed: %s", static_cast<void*>(base), size,
              cuErrorName(r).c_str());
}

namespace {

// Mappings of peers' allocations in this process, by exporter key and device.
struct VmmCache {
  struct Entry {
    char* base;
    size_t size;
    int refs;
  };
  std::mutex mu;
  std::map<std::string, Entry> open;
};
VmmCache& vmmCache() {
  static auto* c = new VmmCache();
  return *c;
}

}  // namespace

char* vmmOpen(const std::string& key, int fd, size_t size, int device) {
  VmmCache& c = vmmCache();
  const std::string k = key + "@" + std::to_string(device);
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.open.find(k);
  if (it != c.open.end()) {
    close(fd);
    CCLX_REQUIRE(it->second.size == size, cclxInvalidArgument,
                 "the peer allocation %s is mapped here with %zu bytes, now published with %zu",
                 key.c_str(), it->second.size, size);
    ++it->second.refs;
    return it->second.base;
  }
  char* base = vmmImport(fd, size, device);
  c.open[k] = VmmCache::Entry{base, size, 1};
  return base;
}

void vmmRelease(const std::string& key, int device) {
  VmmCache& c = vmmCache();
  std::lock_guard<std::mutex> g(c.mu);
  auto it = c.open.find(key + "@" + std::to_string(device));
  if (it == c.open.end() || --it->second.refs > 0) return;
  vmmClose(it->second.base, it->second.size);
  c.open.erase(it);
}

#endif

}  // namespace cclx
