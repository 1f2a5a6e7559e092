// Peer memory's allocations, 'V' or 'H' (see peer_share.h).
#include "gpu/peer_share.h"

#include <unistd.h>

#include <cclx/cclx.hpp>
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/fd_pass.h"
#include "base/log.h"
#include "gpu/driver.h"
#include "gpu/runtime.h"
#include "gpu/window/vmm.h"

namespace cclx::peershare {

ShareOffer offer(const Config& cfg, int device, std::shared_ptr<FdMailbox>* box) {
  ShareOffer o;
  if (cfg.peerMemShare == "ipc") {
    o.whyNot = "CCLX_PEER_MEM_SHARE=ipc";
    return o;
  }
#if defined(CCLX_HAVE_HIP)
  (void)device;
  (void)box;
  o.whyNot = "HIP builds share peer memory by HIP IPC";
  return o;
#else
  const CuDriver& d = cuDriver();
  if (!d.ok) {
    o.whyNot = "the CUDA driver lacks the virtual memory management API";
    return o;
  }
  CUdevice dev = 0;
  int vmm = 0, fd = 0;
  if (d.deviceGet(&dev, device) != CUDA_SUCCESS ||
      d.attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      d.attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) !=
          CUDA_SUCCESS ||
      !vmm || !fd) {
    o.whyNot = strFormat("cuda:%d cannot export cuMem allocations as file descriptors", device);
    return o;
  }
  o.netns = networkNamespaceId();
  if (o.netns.empty()) {
    o.whyNot = "this process's network namespace is unknown (/proc/self/ns/net)";
    return o;
  }
  try {
    *box = std::make_shared<FdMailbox>();
  } catch (const Error& e) {
    o.whyNot = e.what();
    return o;
  }
  o.mailbox = (*box)->address();
  o.vmm = true;
  return o;
#endif
}

char* alloc(char kind, size_t bytes, int device, std::string* why) {
  if (kind == 'V') {
    try {
      return static_cast<char*>(memAlloc(bytes, device));
    } catch (const Error& e) {
      (void)cudaGetLastError();
      *why = e.what();
      return nullptr;
    }
  }
  char* p = nullptr;
  const cudaError_t e = gpurt::mallocPeerVisible(&p, bytes);
  if (e == cudaSuccess) return p;
  (void)cudaGetLastError();
  *why = cudaGetErrorString(e);
  return nullptr;
}

void release(char kind, char* p) {
  if (!p) return;
  if (kind == 'V') {
    try {
      memFree(p);
    } catch (const Error& e) {
      CCLX_WARN("freeing peer memory %p: %s", static_cast<void*>(p), e.what());
    }
    return;
  }
  const cudaError_t e = cudaFree(p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CCLX_WARN("freeing peer memory %p: %s", static_cast<void*>(p), cudaGetErrorString(e));
  }
}

std::string exportIpc(char* p) {
  cudaIpcMemHandle_t h;
  CCLX_CUDA_CHECK(cudaIpcGetMemHandle(&h, p));
  return std::string(reinterpret_cast<const char*>(&h), sizeof(h));
}

int exportFd(char* p, size_t* size) {
  VmmExport x;
  CCLX_REQUIRE(vmmExport(p, &x), cclxInternalError,
               "peer memory %p is not a cuMem allocation", static_cast<void*>(p));
  if (x.offset != 0) {
    close(x.fd);
    CCLX_THROW(cclxInternalError, "peer memory %p is not the start of its allocation",
               static_cast<void*>(p));
  }
  *size = x.size;
  return x.fd;
}

char* importIpc(const std::string& handle) {
  CCLX_REQUIRE(handle.size() == sizeof(cudaIpcMemHandle_t), cclxInvalidArgument,
               "a malformed IPC handle (%zu bytes)", handle.size());
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* q = nullptr;
  const cudaError_t e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CCLX_THROW(cclxCudaError, "cudaIpcOpenMemHandle failed: %s", cudaGetErrorString(e));
  }
#if !defined(CCLX_HAVE_HIP)
  size_t bytes = 0;  // the mapping's extent, for the tools (markPeerMemoryInitialized)
  const CuDriver& d = cuDriver();
  CUdeviceptr base = 0;
  if (d.ok && d.addressRange(&base, &bytes, reinterpret_cast<CUdeviceptr>(q)) == CUDA_SUCCESS)
    markPeerMemoryInitialized(reinterpret_cast<void*>(base), bytes);
#endif
  return static_cast<char*>(q);
}

char* importFd(int fd, size_t size, int device) { return vmmImport(fd, size, device); }

void unmap(char kind, char* p, size_t size) {
  if (!p) return;
  if (kind == 'V') {
    vmmClose(p, size);
    return;
  }
  const cudaError_t e = cudaIpcCloseMemHandle(p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    CCLX_WARN("cudaIpcCloseMemHandle(%p): %s", static_cast<void*>(p), cudaGetErrorString(e));
  }
}

namespace {

std::chrono::milliseconds timeLeft(Deadline d) {
  if (d == Deadline::max()) return kInfiniteTimeout;
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(d - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

}  // namespace

std::map<int, std::vector<int>> passFds(FdMailbox& box, const std::string* boxes, int rank,
                                        int size, const std::vector<int>& mine,
                                        Deadline deadline) {
  std::string sendError;
  std::vector<int> from;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    from.push_back(r);
    const auto t =
        std::min<std::chrono::milliseconds>(timeLeft(deadline), std::chrono::seconds(30));
    try {
      box.sendMany(boxes[r], mine, rank, t);
    } catch (const Error& e) {
      if (sendError.empty())
        sendError = strFormat("sending rank %d's peer memory to rank %d: %s", rank, r, e.what());
      try {
        box.sendMany(boxes[r], {}, rank, std::chrono::seconds(1));
      } catch (const Error&) {
      }
    }
  }
  std::map<int, std::vector<int>> got = box.receiveMany(from, timeLeft(deadline));
  if (!sendError.empty()) {
    closeFds(got);
    CCLX_THROW(cclxSystemError, "%s", sendError.c_str());
  }
  return got;
}

void closeFds(std::map<int, std::vector<int>>& got) {
  for (auto& [r, fds] : got)
    for (int& fd : fds)
      if (fd >= 0) {
        close(fd);
        fd = -1;
      }
}

}  // namespace cclx::peershare
