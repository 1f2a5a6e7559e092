// Device memory: registration with NCCL (CudaBackend::registerBuffer) and memory every cclx
// transport can share (cclx::memAlloc, torchcomms' get_mem_allocator). CUDA builds allocate with
// the driver's virtual memory management API (cuMemCreate exportable as a POSIX file descriptor,
// mapped and made accessible to this device and its peers): the memory NCCL's buffer
// registration and symmetric windows map on the peers, and that cclx's one-host windows import
// by file descriptor (gpu/window/). No multicast object is created or queried. HIP builds:
// hipMalloc, which HIP IPC exports.
#include <cclx/cclx.hpp>

#include <vector>

#include "base/error.h"
#include "gpu/backend.h"
#include "gpu/driver.h"
#include "gpu/nccl/loader.h"
#include "gpu/runtime.h"

namespace cclx {

void* CudaBackend::registerBuffer(void* ptr, size_t bytes) {
  sh_->throwIfFailed();
  int dev = -1;
  const gpurt::MemKind kind = gpurt::memKind(ptr, dev);
  CCLX_ARG_CHECK(kind == gpurt::MemKind::kDevice || kind == gpurt::MemKind::kManaged,
                 "tensor_register: %p is not device memory (the comm uses cuda:%d)", ptr,
                 sh_->device);
  CCLX_ARG_CHECK(kind == gpurt::MemKind::kManaged || dev == sh_->device,
                 "tensor_register: %p is memory of cuda:%d but the comm uses cuda:%d", ptr, dev,
                 sh_->device);
  if (!sh_->comm || !ncclLib().commRegister || !ncclLib().commDeregister) return nullptr;
  DeviceGuard g(sh_->device);
  void* h = nullptr;
  ncclCheck(ncclLib().commRegister(sh_->comm, ptr, bytes, &h), "ncclCommRegister", sh_->comm);
  return h;
}

void CudaBackend::deregisterBuffer(void* handle) {
  if (!sh_->comm || sh_->failed.load()) return;  // a failed comm's teardown releases it
  DeviceGuard g(sh_->device);
  ncclCheck(ncclLib().commDeregister(sh_->comm, handle), "ncclCommDeregister", sh_->comm);
}

#if defined(CCLX_HAVE_HIP)

void* memAlloc(size_t bytes, int device) {
  CCLX_ARG_CHECK(bytes > 0, "memAlloc: zero bytes");
  if (device < 0) CCLX_CUDA_CHECK(cudaGetDevice(&device));
  DeviceGuard g(device);
  void* p = nullptr;
  CCLX_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void memFree(void* ptr) {
  if (ptr) CCLX_CUDA_CHECK(cudaFree(ptr));  // waits for the device
}

#else

void* memAlloc(size_t bytes, int device) {
  CCLX_ARG_CHECK(bytes > 0, "memAlloc: zero bytes");
  const CuDriver& v = cuDriver();
  CCLX_REQUIRE(v.ok, cclxUnsupported,
               "memAlloc: the CUDA driver lacks the virtual memory management API");
  if (device < 0) CCLX_CUDA_CHECK(cudaGetDevice(&device));
  int vmmOk = 0, rdma = 0, count = 0;
  CCLX_CUDA_CHECK(cudaGetDeviceCount(&count));
  CCLX_ARG_CHECK(device < count, "memAlloc: no device cuda:%d (%d visible)", device, count);
  CUdevice dev = 0;
  CCLX_CU_CHECK(v.deviceGet(&dev, device));
  CCLX_CU_CHECK(
      v.attribute(&vmmOk, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  CCLX_REQUIRE(vmmOk, cclxUnsupported,
               "memAlloc: cuda:%d does not support virtual memory management", device);
  CCLX_CU_CHECK(
      v.attribute(&rdma, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, dev));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (rdma) prop.allocFlags.gpuDirectRDMACapable = 1;
  size_t gran = 0;
  CCLX_CU_CHECK(v.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (gran == 0) gran = size_t(2) << 20;
  CCLX_ARG_CHECK(bytes <= SIZE_MAX - gran, "memAlloc: %zu bytes is too large", bytes);
  const size_t size = (bytes + gran - 1) / gran * gran;

  // This device and every device it can reach: what NCCL's allocator grants too.
  std::vector<CUmemAccessDesc> access;
  for (int d = 0; d < count; ++d) {
    int peer = d == device;
    if (!peer) CCLX_CUDA_CHECK(cudaDeviceCanAccessPeer(&peer, d, device));
    if (!peer) continue;
    CUmemAccessDesc a = {};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = d;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access.push_back(a);
  }

  DeviceGuard g(device);
  CCLX_CUDA_CHECK(cudaFree(nullptr));  // the device's primary context, current on this thread
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  CUresult r = v.create(&h, size, &prop, 0);
  if (r != CUDA_SUCCESS)
    CCLX_THROW(cclxCudaError, "memAlloc: cuMemCreate of %zu bytes on cuda:%d failed: %s", size, device,
               cuErrorName(r).c_str());
  r = v.reserve(&va, size, gran, 0, 0);
  bool mapped = false;
  if (r == CUDA_SUCCESS) {
    r = v.map(va, size, 0, h, 0);
    mapped = r == CUDA_SUCCESS;
  }
  if (r == CUDA_SUCCESS) r = v.setAccess(va, size, access.data(), access.size());
  v.release(h);  // the mapping keeps the memory
  if (r != CUDA_SUCCESS) {
    if (mapped) v.unmap(va, size);
    if (va) v.addressFree(va, size);
    CCLX_THROW(cclxCudaError, "memAlloc: mapping %zu bytes on cuda:%d failed: %s", size, device,
               cuErrorName(r).c_str());
  }
  return reinterpret_cast<void*>(va);
}

void memFree(void* ptr) {
  if (!ptr) return;
  const CuDriver& v = cuDriver();
  CCLX_REQUIRE(v.ok, cclxUnsupported, "memFree: the CUDA driver lacks the VMM API");
  int device = -1;
  gpurt::memKind(ptr, device);
  if (device < 0) CCLX_CUDA_CHECK(cudaGetDevice(&device));
  DeviceGuard g(device);
  CCLX_CUDA_CHECK(cudaFree(nullptr));  // the primary context, current for the driver calls
  CUdeviceptr base = 0;
  size_t size = 0;
  CCLX_REQUIRE(v.addressRange(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS,
               cclxInvalidArgument, "memFree: %p is not device memory", ptr);
  CCLX_ARG_CHECK(base == reinterpret_cast<CUdeviceptr>(ptr),
                 "memFree: %p is not the start of a memAlloc allocation", ptr);
  CUmemGenericAllocationHandle h = 0;
  CCLX_REQUIRE(v.retain(&h, ptr) == CUDA_SUCCESS, cclxInvalidArgument,
               "memFree: %p was not allocated by memAlloc", ptr);
  v.release(h);
  CCLX_CUDA_CHECK(cudaDeviceSynchronize());  // as cudaFree: work still using the memory ends first
  CCLX_CU_CHECK(v.unmap(base, size));
  CCLX_CU_CHECK(v.addressFree(base, size));
}

#endif

// A call's buffers must be memory of the comm's device (or managed memory): checked before
// anything is enqueued.
void CudaBackend::checkPointer(const void* p, const char* what) const {
  if (!p) return;
  int device = -1;
  const gpurt::MemKind kind = gpurt::memKind(p, device);
  if (kind == gpurt::MemKind::kManaged) return;
  if (kind != gpurt::MemKind::kDevice)
    CCLX_THROW(cclxInvalidUsage, "%s buffer %p is host memory, not memory of the comm's device cuda:%d",
               what, p, sh_->device);
  if (device != sh_->device)
    CCLX_THROW(cclxInvalidUsage, "%s buffer %p is on cuda:%d but the comm uses cuda:%d", what, p,
               device, sh_->device);
}

void CudaBackend::checkPointers(const CollArgs& a) const {
  if (a.type == CollType::AllToAllVDevice) {  // the split sizes are read on the device
    checkPointer(a.rows.send, "send split sizes");
    checkPointer(a.rows.recv, "recv split sizes");
    if (a.rows.sendCap) checkPointer(a.send, "send");
    if (a.rows.recvCap && a.recv != a.send) checkPointer(a.recv, "recv");
    return;
  }
  size_t total = a.count;
  if (a.type == CollType::AllToAllV) {
    total = 0;
    for (size_t c : a.sendCounts) total += c;
    for (size_t c : a.recvCounts) total += c;
  }
  if (a.type == CollType::Barrier || total == 0) return;
  if (a.type == CollType::AllReduceRmsNorm) {
    const RmsNormArgs& r = a.rms;
    checkPointer(r.x, "x");
    checkPointer(r.residual, "residual");
    checkPointer(r.residualOut, "residualOut");
    checkPointer(r.weight, "weight");
    checkPointer(r.out, "out");
    checkPointer(r.fp8Out, "fp8Out");
    checkPointer(r.scales, "scales");
    checkPointer(r.staticScale, "static scale");
    return;
  }
  checkPointer(a.send, "send");
  if (a.recv != a.send) checkPointer(a.recv, "recv");
  if (a.type == CollType::ReduceScatterQuantized) checkPointer(a.seed, "seed");
  for (void* p : a.recvList) checkPointer(p, "recv list");
  for (const void* p : a.sendList) checkPointer(p, "send list");
  for (const P2PSend& m : a.sends) if (m.count) checkPointer(m.buf, "send");
  for (const P2PRecv& m : a.recvs) if (m.count) checkPointer(m.buf, "recv");
}

}  // namespace cclx
