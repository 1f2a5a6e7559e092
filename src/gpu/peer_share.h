// Peer memory's allocations in the two ways of sharing them that core/sharing/peer_share.h
// describes: 'V' (memory of CUDA's virtual memory management API, exported as a POSIX file
// descriptor; gpu/window/vmm.h) and 'H' (legacy CUDA IPC of gpurt::mallocPeerVisible memory; HIP
// IPC in HIP builds). gpu/peer_mem.cc decides which and moves the handles.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/settings/config.h"
#include "core/sharing/peer_share.h"

namespace cclx {

class FdMailbox;

namespace peershare {

/// This rank's offer for its peer memory: 'V' when the setting allows it (CCLX_PEER_MEM_SHARE),
/// the build is CUDA's, the driver and `device` support cuMem allocations exportable as file
/// descriptors, and a mailbox could be bound (*box is then set); otherwise 'H' and why not.
ShareOffer offer(const Config& cfg, int device, std::shared_ptr<FdMailbox>* box);

/// Allocates `bytes` of peer memory on the current device: 'V' with cclx::memAlloc (rounded up
/// to the allocation granularity), 'H' with gpurt::mallocPeerVisible. Null with *why on failure
/// (the runtime's error cleared).
char* alloc(char kind, size_t bytes, int device, std::string* why);
/// Frees what alloc() returned (failures are logged; the device is synchronized as cudaFree
/// does).
void release(char kind, char* p);

/// 'H': the CUDA IPC handle of p (the start of an alloc()), as bytes. Throws cclxCudaError.
std::string exportIpc(char* p);
/// 'V': p's allocation as a file descriptor (the caller closes it) and its mapped size. Throws.
int exportFd(char* p, size_t* size);

/// Opens a peer's 'H' handle (exportIpc's bytes). Throws cclxCudaError naming the driver's error.
char* importIpc(const std::string& handle);
/// Maps a peer's 'V' allocation (takes fd: closed on every path). Throws cclxCudaError.
char* importFd(int fd, size_t size, int device);
/// Undoes importIpc ('H') or importFd ('V', `size` bytes); failures are logged.
void unmap(char kind, char* p, size_t size);

/// This rank's own buffer (an alloc() of `kind`), released at scope exit unless leak()ed.
struct OwnedBuf {
  char kind = 'H';
  char* p = nullptr;
  ~OwnedBuf() { release(kind, p); }
  char* leak() {
    char* q = p;
    p = nullptr;
    return q;
  }
};

using Deadline = std::chrono::steady_clock::time_point;

/// 'V': sends this rank's descriptors `mine` (in order, one datagram, tag = rank) from `box` to
/// the mailbox of every other rank of `size` (boxes[r]: rank r's address), then receives one
/// datagram from every other rank: rank -> its descriptors (the caller closes them, closeFds).
/// Throws cclxTimeout naming the ranks not heard from by `deadline` (Deadline::max(): none), or
/// the first send's error; a peer that could not be sent to still gets the datagram without
/// descriptors, so nobody waits for nothing. One datagram per peer and exchange: a mailbox never
/// holds more than size - 1 (below the kernel's queue limit).
std::map<int, std::vector<int>> passFds(FdMailbox& box, const std::string* boxes, int rank,
                                        int size, const std::vector<int>& mine,
                                        Deadline deadline);
/// Closes every descriptor still in `got` (>= 0) and marks it -1.
void closeFds(std::map<int, std::vector<int>>& got);

}  // namespace peershare
}  // namespace cclx
