// One-sided windows on GPU comms over memory of CUDA's virtual memory management API (cuMemCreate
// exportable as a POSIX file descriptor, mapped here with cuMemMap), which CUDA IPC refuses and
// the windows map on the peers by file descriptor: a ring of puts (copy engine and SM stores) and
// direct access at an offset inside the allocation, two windows on one allocation at once (one
// mapping per peer process, kept while either window holds it), re-registration, ranks that mix
// cuMem and cudaMalloc memory, and refusals on every rank: memory created without file-descriptor
// export, a buffer that runs from one allocation into the next.
//
// World size: CCLX_TEST_RANKS (default 2); rank r on GPU r % count.
#include <gtest/gtest.h>

#if defined(CCLX_HAVE_CUDA)

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpu/driver.h"
#include "helpers/gpu_util.h"
#include "helpers/win_util.h"

using namespace cclx;
using namespace gputest;
using namespace winutil;
using namespace std::chrono_literals;

namespace {

std::vector<char> pattern(int rank, uint64_t round, size_t n) {
  std::vector<char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = char(mix(uint64_t(rank) << 40 ^ round << 32 ^ i) | 1u);
  return v;
}

// The driver's VMM functions, as the library reaches them.
const CuDriver& drv() {
  const CuDriver& d = cuDriver();
  MP_CHECK(d.ok, "the CUDA driver lacks the virtual memory management API");
  return d;
}

#define CU(call)                                                  \
  do {                                                            \
    const CUresult r_ = (call);                                   \
    MP_CHECK(r_ == CUDA_SUCCESS, "%s: CUresult %d", #call, int(r_)); \
  } while (0)

// `pieces` cuMem allocations of `bytes` each (rounded up to the granularity) mapped side by side
// in one address range, read-write for `device`; exportable as POSIX descriptors or not.
struct VmmBuf {
  char* base = nullptr;
  size_t piece = 0, total = 0;
  int pieces = 1;
  VmmBuf(size_t bytes, int device, bool exportable, int n = 1) : pieces(n) {
    const CuDriver& d = drv();
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    prop.requestedHandleTypes =
        exportable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
    size_t gran = 0;
    CU(d.granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    piece = (bytes + gran - 1) / gran * gran;
    total = piece * size_t(n);
    CUdeviceptr va = 0;
    CU(d.reserve(&va, total, gran, 0, 0));
    CUmemAccessDesc access = {};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = device;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (int i = 0; i < n; ++i) {
      CUmemGenericAllocationHandle h = 0;
      CU(d.create(&h, piece, &prop, 0));
      CU(d.map(va + size_t(i) * piece, piece, 0, h, 0));
      CU(d.release(h));
    }
    CU(d.setAccess(va, total, &access, 1));
    base = reinterpret_cast<char*>(va);
  }
  ~VmmBuf() {
    (void)cudaDeviceSynchronize();
    const CUdeviceptr va = reinterpret_cast<CUdeviceptr>(base);
    for (int i = 0; i < pieces; ++i) drv().unmap(va + size_t(i) * piece, piece);
    drv().addressFree(va, total);
  }
  VmmBuf(const VmmBuf&) = delete;
  void fill(int byte) {
    CK(cudaMemset(base, byte, total));
    CK(cudaDeviceSynchronize());
  }
};

// A ring of `rounds` put + signal + wait over window w (count bytes per rank, block = rank's
// place), then every rank's window read through remotePtr. `buf` is this rank's window memory.
void ring(Comm& comm, Window& w, char* buf, size_t count, int rank, int n, cudaStream_t s,
          uint64_t seed) {
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  const size_t block = count / size_t(n);
  char* src = nullptr;
  CK(cudaMalloc(&src, block));
  for (uint64_t k = 0; k < 4; ++k) {
    const std::vector<char> mine = pattern(rank, seed + k, block);
    CK(cudaMemcpy(src, mine.data(), block, cudaMemcpyHostToDevice));
    // A copy from pageable memory may return before its DMA is done, and s does not wait for it.
    CK(cudaDeviceSynchronize());
    w.put(src, block, next, size_t(rank) * block, on(s, k % 2 ? "ce" : "sm"));
    w.signal(next, on(s));
    w.waitSignal(prev, on(s));
    CK(cudaStreamSynchronize(s));
    const std::vector<char> got = d2h(buf + size_t(prev) * block, block);
    const std::vector<char> want = pattern(prev, seed + k, block);
    size_t bad = 0;
    while (bad < block && got[bad] == want[bad]) ++bad;
    MP_CHECK(bad == block, "round %llu: the block from rank %d differs from byte %zu on",
             static_cast<unsigned long long>(k), prev, bad);
    comm.barrier(on(s));
    CK(cudaStreamSynchronize(s));
  }
  for (int r = 0; r < n; ++r) {
    MP_CHECK(w.access(r) == WinAccess::Unified, "access(%d)", r);
    const char* theirs = static_cast<const char*>(w.remotePtr(r));
    const int from = (r + n - 1) % n;
    MP_CHECK(d2h(theirs + size_t(from) * block, block) == pattern(from, seed + 3, block),
             "rank %d's window as mapped here", r);
  }
  comm.barrier(on(s));
  CK(cudaStreamSynchronize(s));
  CK(cudaFree(src));
}

TEST(GpuWindowVmm, RingTwoWindowsOneAllocationReregister) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("win_vmm", [](Comm& comm, int rank, int n, cudaStream_t s) {
    VmmBuf mem(8 << 20, deviceOf(rank), true);
    mem.fill(0x3C);
    const size_t count = size_t(n) * 70001;
    // Offsets differ between ranks: each peer adds the owner's offset to its own mapping.
    char* a = mem.base + 4096 + size_t(rank) * 256;
    char* b = mem.base + (2 << 20) + size_t(rank) * 512;
    auto wa = comm.newWindow();
    auto wb = comm.newWindow();
    wa->registerBuffer(a, count, DataType::u8);
    MP_CHECK(std::string(wa->transport()) == "ipc", "transport %s", wa->transport());
    wb->registerBuffer(b, count, DataType::u8);
    ring(comm, *wa, a, count, rank, n, s, 100);
    ring(comm, *wb, b, count, rank, n, s, 200);
    // Both windows reach the same peer allocation through one mapping.
    for (int r = 0; r < n; ++r) {
      const ptrdiff_t apart = ptrdiff_t((2 << 20) + r * 512) - ptrdiff_t(4096 + r * 256);
      MP_CHECK(static_cast<char*>(wb->remotePtr(r)) - static_cast<char*>(wa->remotePtr(r)) ==
                   apart,
               "rank %d: the two windows use different mappings", r);
    }
    std::vector<void*> peerMaps;
    for (int r = 0; r < n; ++r)
      if (r != rank) peerMaps.push_back(wa->remotePtr(r));
    wa->deregisterBuffer();
    ring(comm, *wb, b, count, rank, n, s, 300);  // b's mapping outlives a's window
    wb->deregisterBuffer();
    // The last window let go: the peers' allocations are unmapped here.
    for (void* p : peerMaps) {
      cudaPointerAttributes at{};
      const cudaError_t e = cudaPointerGetAttributes(&at, p);
      (void)cudaGetLastError();
      MP_CHECK(e != cudaSuccess || at.type == cudaMemoryTypeUnregistered,
               "a peer's allocation is still mapped at %p (type %d)", p, int(at.type));
    }
    wa->registerBuffer(a, count, DataType::u8);  // mapped again from scratch
    ring(comm, *wa, a, count, rank, n, s, 400);
    wa->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuWindowVmm, MixedWithCudaMalloc) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("win_vmm_mixed", [](Comm& comm, int rank, int n, cudaStream_t s) {
    const size_t count = size_t(n) * 4099;
    VmmBuf mem(count + 8192, deviceOf(rank), true);
    DevBuf plain(count + 8192, 0);
    plain.poison();  // every byte written before a peer's puts (as the cuMem buffer is)
    char* buf = rank % 2 == 0 ? mem.base + 8192 : plain.base + 8192;
    auto w = comm.newWindow();
    w->registerBuffer(buf, count, DataType::u8);
    ring(comm, *w, buf, count, rank, n, s, 500);
    w->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

TEST(GpuWindowVmm, RefusedOnEveryRank) {
  GPU_REQUIRE(1);
  auto res = onWindowRanks("win_vmm_refused", [](Comm& comm, int rank, int n, cudaStream_t s) {
    const size_t count = 1 << 16;
    VmmBuf good(4 << 20, deviceOf(rank), true);
    VmmBuf hidden(4 << 20, deviceOf(rank), false);
    VmmBuf pair(2 << 20, deviceOf(rank), true, 2);
    auto w = comm.newWindow();

    char* noExport = rank == 0 ? hidden.base : good.base;
    std::string m = expectError(cclxInvalidArgument,
                                [&] { w->registerBuffer(noExport, count, DataType::u8); },
                                "memory without descriptor export");
    MP_CHECK(m.find("rank 0:") != std::string::npos && m.find("POSIX file-descriptor") !=
                                                           std::string::npos,
             "message: %s", m.c_str());
    MP_CHECK(!w->registered(), "registered after a refusal");

    // Rank n - 1's buffer starts 1 KiB before the end of the first allocation of the pair.
    char* spans = rank == n - 1 ? pair.base + pair.piece - 1024 : good.base;
    m = expectError(cclxInvalidArgument, [&] { w->registerBuffer(spans, count, DataType::u8); },
                    "buffer across two allocations");
    MP_CHECK(m.find(strFormat("rank %d:", n - 1)) != std::string::npos &&
                 m.find("runs past the end") != std::string::npos,
             "message: %s", m.c_str());

    // Nothing was left half-registered: the window still works.
    w->registerBuffer(good.base + 256, count, DataType::u8);
    ring(comm, *w, good.base + 256, count - count % size_t(n), rank, n, s, 600);
    w->deregisterBuffer();
  });
  ASSERT_TRUE(res.ok()) << res.log;
}

}  // namespace

#endif  // CCLX_HAVE_CUDA
