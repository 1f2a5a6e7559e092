// The GPU runtime API of src/gpu, written once with CUDA's names. A CUDA build includes
// <cuda_runtime.h>; a HIP build (CCLX_HAVE_HIP, AMD GPUs) maps every cuda* type, constant and
// function the host code uses to its hip* twin, so backend, peer memory, Work and the NCCL/RCCL
// collectives compile unchanged against the HIP runtime. What differs beyond a name is in gpurt::
// (pointer kinds, peer-visible allocations, the device timer). Also CCLX_CUDA_CHECK.
#pragma once

#if defined(CCLX_HAVE_HIP)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif

#include <cstddef>
#include <cstdint>

#include "base/error.h"

#if defined(CCLX_HAVE_HIP)

using cudaError_t = hipError_t;
using cudaStream_t = hipStream_t;
using cudaEvent_t = hipEvent_t;
using cudaIpcMemHandle_t = hipIpcMemHandle_t;
using cudaStreamCaptureMode = hipStreamCaptureMode;
using cudaStreamCaptureStatus = hipStreamCaptureStatus;
using cudaMemcpyKind = hipMemcpyKind;

constexpr hipError_t cudaSuccess = hipSuccess;
constexpr hipError_t cudaErrorNotReady = hipErrorNotReady;
constexpr hipStreamCaptureMode cudaStreamCaptureModeRelaxed = hipStreamCaptureModeRelaxed;
constexpr hipStreamCaptureStatus cudaStreamCaptureStatusNone = hipStreamCaptureStatusNone;
constexpr hipMemcpyKind cudaMemcpyDeviceToDevice = hipMemcpyDeviceToDevice;
constexpr hipMemcpyKind cudaMemcpyHostToDevice = hipMemcpyHostToDevice;
constexpr hipMemcpyKind cudaMemcpyDefault = hipMemcpyDefault;
constexpr hipMemcpyKind cudaMemcpyDeviceToHost = hipMemcpyDeviceToHost;
constexpr unsigned cudaHostAllocDefault = hipHostMallocDefault;
constexpr hipDeviceAttribute_t cudaDevAttrMultiProcessorCount =
    hipDeviceAttributeMultiprocessorCount;
constexpr unsigned cudaStreamNonBlocking = hipStreamNonBlocking;
constexpr unsigned cudaEventDisableTiming = hipEventDisableTiming;
constexpr unsigned cudaIpcMemLazyEnablePeerAccess = hipIpcMemLazyEnablePeerAccess;
// Mapped pinned memory that kernels write while the host polls it (the error words): coherent,
// as CUDA's mapped memory always is.
constexpr unsigned cudaHostAllocMapped = hipHostMallocMapped | hipHostMallocCoherent;

#define cudaGetErrorName hipGetErrorName
#define cudaGetErrorString hipGetErrorString
#define cudaGetLastError hipGetLastError
#define cudaPeekAtLastError hipPeekAtLastError
#define cudaGetDeviceCount hipGetDeviceCount
#define cudaGetDevice hipGetDevice
#define cudaSetDevice hipSetDevice
#define cudaDeviceGetAttribute hipDeviceGetAttribute
#define cudaDeviceGetPCIBusId hipDeviceGetPCIBusId
#define cudaDeviceGetByPCIBusId hipDeviceGetByPCIBusId
#define cudaDeviceCanAccessPeer hipDeviceCanAccessPeer
#define cudaDeviceSynchronize hipDeviceSynchronize
#define cudaMalloc hipMalloc
#define cudaFree hipFree
#define cudaMemset hipMemset
#define cudaMemsetAsync hipMemsetAsync
#define cudaMallocAsync hipMallocAsync
#define cudaFreeAsync hipFreeAsync
#define cudaMemcpyAsync hipMemcpyAsync
#define cudaHostAlloc hipHostMalloc
#define cudaFreeHost hipHostFree
#define cudaHostGetDevicePointer hipHostGetDevicePointer
#define cudaStreamCreateWithFlags hipStreamCreateWithFlags
#define cudaStreamDestroy hipStreamDestroy
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaStreamWaitEvent hipStreamWaitEvent
#define cudaStreamIsCapturing hipStreamIsCapturing
#define cudaStreamGetCaptureInfo hipStreamGetCaptureInfo
#define cudaStreamQuery hipStreamQuery
#define cudaThreadExchangeStreamCaptureMode hipThreadExchangeStreamCaptureMode
#define cudaEventCreateWithFlags hipEventCreateWithFlags
#define cudaEventDestroy hipEventDestroy
#define cudaEventRecord hipEventRecord
#define cudaEventQuery hipEventQuery
#define cudaEventSynchronize hipEventSynchronize
#define cudaStreamSynchronize hipStreamSynchronize
#define cudaIpcGetMemHandle hipIpcGetMemHandle
#define cudaIpcOpenMemHandle hipIpcOpenMemHandle
#define cudaIpcCloseMemHandle hipIpcCloseMemHandle

#endif  // CCLX_HAVE_HIP

/// Every runtime failure becomes cclx::Error(cclxCudaError).
#define CCLX_CUDA_CHECK(call)                                                              \
  do {                                                                                     \
    cudaError_t cclx_e_ = (call);                                                          \
    if (cclx_e_ != cudaSuccess)                                                            \
      CCLX_THROW(cclxCudaError, "%s failed: %s (%s) at %s:%d", #call,                      \
                 cudaGetErrorName(cclx_e_), cudaGetErrorString(cclx_e_), __FILE__, __LINE__); \
  } while (0)

namespace cclx {
namespace gpurt {

/// True in a HIP build.
#if defined(CCLX_HAVE_HIP)
constexpr bool kHip = true;
#else
constexpr bool kHip = false;
#endif

/// Nominal rate of the HIP device timer (wall_clock64(), the s_memrealtime counter of gfx9
/// GPUs), in kHz: dev::globalTimerNs() counts 1e6 / kWallClockKHz ns per tick.
constexpr uint32_t kWallClockKHz = 100000;

/// What a pointer is to the runtime.
enum class MemKind { kOther, kDevice, kManaged };

/// The kind of memory at p and, for device memory, its device. Clears the runtime's error state
/// when the runtime does not know the pointer (kOther).
inline MemKind memKind(const void* p, int& device) {
  device = -1;
#if defined(CCLX_HAVE_HIP)
  hipPointerAttribute_t at{};
  if (hipPointerGetAttributes(&at, p) != hipSuccess) {
    (void)hipGetLastError();
    return MemKind::kOther;
  }
#if HIP_VERSION_MAJOR >= 6
  const hipMemoryType type = at.type;
#else
  const hipMemoryType type = at.memoryType;
#endif
  if (at.isManaged) return MemKind::kManaged;
  if (type != hipMemoryTypeDevice) return MemKind::kOther;
#else
  cudaPointerAttributes at{};
  if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return MemKind::kOther;
  }
  if (at.type == cudaMemoryTypeManaged) return MemKind::kManaged;
  if (at.type != cudaMemoryTypeDevice) return MemKind::kOther;
#endif
  device = at.device;
  return MemKind::kDevice;
}

/// Device memory that peer GPUs access while kernels run (staging and flags). HIP: fine-grained,
/// so that system-scope atomics and volatile accesses are coherent with the peers' writes over
/// xGMI (ordinary hipMalloc memory is coherent only at kernel boundaries).
inline cudaError_t mallocPeerVisible(char** p, size_t bytes) {
#if defined(CCLX_HAVE_HIP)
  return hipExtMallocWithFlags(reinterpret_cast<void**>(p), bytes, hipDeviceMallocFinegrained);
#else
  return cudaMalloc(p, bytes);
#endif
}

/// Device-timer nanoseconds per real nanosecond on `device`: 1 with CUDA (%globaltimer counts
/// ns); with HIP the device's wall-clock rate over kWallClockKHz (read from the runtime where it
/// reports it, ROCm 6 and later; otherwise the nominal rate is taken).
inline double timerScale(int device) {
#if defined(CCLX_HAVE_HIP) && HIP_VERSION_MAJOR >= 6
  int khz = 0;
  if (hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, device) != hipSuccess) {
    (void)hipGetLastError();
    return 1.0;
  }
  return khz > 0 ? double(khz) / double(kWallClockKHz) : 1.0;
#else
  (void)device;
  return 1.0;
#endif
}

/// True when contexts on `device` are clients of an MPS server (CUDA's multi-process service;
/// core/sharing/mps.h says why ranks sharing a GPU care). HIP: false.
inline bool mpsEnabled(int device) {
#if defined(CCLX_HAVE_HIP)
  (void)device;
  return false;
#else
  int v = 0;
  if (cudaDeviceGetAttribute(&v, cudaDevAttrMpsEnabled, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return v != 0;
#endif
}

}  // namespace gpurt
}  // namespace cclx
