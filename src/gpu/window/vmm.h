// Memory of CUDA's virtual memory management API (cuMemCreate + cuMemMap: cclx::memAlloc,
// ncclMemAlloc, torch's MemPool over either) shared between the processes of one host: the
// exporter turns the allocation that holds a buffer into a POSIX file descriptor, which travels
// to the peers (base/fd_pass.h); each peer imports it and maps the whole allocation into an
// address range of its own. Legacy CUDA IPC (cudaIpcGetMemHandle) refuses such memory.
// HIP builds: no such memory (vmmExport says no, vmmImport is cclxUnsupported).
#pragma once

#include <cstddef>
#include <string>

namespace cclx {

/// What vmmExport() found for a pointer.
struct VmmExport {
  char* base = nullptr;  // start of the allocation's mapping in this process
  size_t size = 0;       // its size in bytes
  size_t offset = 0;     // the pointer's offset from base
  int fd = -1;           // the allocation as a POSIX file descriptor (the caller closes it)
  // The allocation's identity on this host (printable, no ':'): this process (vmmProcessId),
  // base, and the driver's buffer id, which no later allocation reuses (where the driver has
  // none: a number drawn for this export alone, so that nothing is shared on the peers).
  std::string key;
};

/// False when ptr lies in no cuMem mapping (cudaMalloc memory and the like: nothing is
/// touched). Otherwise fills *out. Throws cclxInvalidArgument when the allocation was created
/// without POSIX file-descriptor export (other processes cannot map it), cclxCudaError when the
/// driver refuses the export.
bool vmmExport(const void* ptr, VmmExport* out);

/// Maps the allocation behind `fd` (a vmmExport() descriptor of another process, `size` bytes)
/// into a fresh address range, read-write for CUDA device `device`; returns its start. Takes fd:
/// closed on every path. On failure undoes what it did and throws cclxCudaError naming the
/// driver's error.
char* vmmImport(int fd, size_t size, int device);

/// Unmaps what vmmImport() mapped and frees its address range (failures are logged).
void vmmClose(char* base, size_t size);

/// Tells memory-checking tools (compute-sanitizer's initcheck, through NVTX's memory API; a
/// no-op without a tool) that [p, p + bytes), another process's memory mapped into this one,
/// holds initialized data: its owner wrote it, which a tool watching this process cannot see.
/// Called on every peer mapping (vmmImport, peershare::importIpc); the owner's own accesses
/// stay checked in the owner's process. Nothing with HIP.
void markPeerMemoryInitialized(const void* p, size_t bytes);

/// This process's identity in cache keys: its pid and a random number drawn once (unique across
/// the pid namespaces of one host).
const std::string& vmmProcessId();

/// vmmImport() once per (key, device) in this process, reference-counted: `key` is the
/// exporter's VmmExport::key, so two windows on one allocation share one mapping. Takes fd
/// (closed on every path, also when the mapping exists already). Every vmmOpen() that returned
/// is matched by one vmmRelease().
char* vmmOpen(const std::string& key, int fd, size_t size, int device);
/// Drops one reference; the last one unmaps (vmmClose).
void vmmRelease(const std::string& key, int device);

}  // namespace cclx
