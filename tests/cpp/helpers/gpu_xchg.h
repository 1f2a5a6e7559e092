// The cases and buffers of the several-ranks-per-GPU tests of the DDA exchange kernels
// (tests/cpp/gpu/test_gpu_shared_colls.cc): per-rank comms (rank r on GPU r % count; the harness
// is helpers/gpu_ranks.h) with a small staging on request, every collective's buffers in every
// mode (out of place, in place, list, overlapping), the twin's result and the byte-exact
// comparison.
#pragma once

#if defined(CCLX_HAVE_CUDA)

#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/comm/backend.h"
#include "core/settings/config.h"
#include "gpu/backend.h"
#include "helpers/gpu_ranks.h"
#include "helpers/gpu_util.h"

namespace xchgtest {

using namespace cclx;
using namespace gputest;

// small: a 2 MiB staging cap and 4 blocks, so that pipelined calls take many chunks per block and
// LL fits only a few KiB (read when the comm is created).
inline std::shared_ptr<Comm> gpuComm(int rank, int size, std::shared_ptr<Store> store, const char* name,
                              bool small = false,
                              std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  if (small) {
    setenv("CCLX_DDA_STAGING_BYTES", "2M", 1);
    setenv("CCLX_DDA_MAX_BLOCKS", "4", 1);
  } else {
    unsetenv("CCLX_DDA_STAGING_BYTES");
    unsetenv("CCLX_DDA_MAX_BLOCKS");
  }
  reloadConfig();
  return sharedGpuComm(rank, size, std::move(store), name, timeout);
}

inline CudaBackend& backendOf(Comm& c) {
  auto* b = dynamic_cast<CudaBackend*>(CommAccess::state(c).backend.get());
  MP_CHECK(b != nullptr, "not a CUDA comm");
  return *b;
}

using Hints = std::map<std::string, std::string>;

enum Mode { kOut = 0, kInPlace = 1, kList = 2, kOverlap = 3 };

struct XCase {
  CollType type = CollType::AllGather;
  DataType t = DataType::f32;
  ReduceOp op = RedOpKind::SUM;
  size_t count = 1031;  // elements per block
  Mode mode = kOut;
  size_t offset = 0;    // bytes added to every device pointer (unaligned unless a multiple of 16)
  Hints hints;
  const char* expect = nullptr;  // the algorithm the selection must name ("ll", "pipelined")
  std::vector<size_t> sc, rc;    // all-to-all-v counts of this rank
};

inline std::string describe(const XCase& c) {
  std::string s = strFormat("%s %s %s count=%zu mode=%d offset=%zu", collName(c.type),
                            dtypeName(c.t), opName(c.op.kind), c.count, int(c.mode), c.offset);
  for (const auto& [k, v] : c.hints) s += " " + k + "=" + v;
  return s;
}

inline size_t sum(const std::vector<size_t>& v) {
  size_t s = 0;
  for (size_t x : v) s += x;
  return s;
}
inline size_t inElems(const XCase& c, int n) {
  switch (c.type) {
    case CollType::AllGather: return c.count;
    case CollType::AllToAllV: return sum(c.sc);
    default: return c.count * size_t(n);
  }
}
inline size_t outElems(const XCase& c, int n) {
  switch (c.type) {
    case CollType::ReduceScatter: return c.count;
    case CollType::AllToAllV: return sum(c.rc);
    default: return c.count * size_t(n);
  }
}

// Random bytes for copies (every bit pattern), generated values for reductions.
inline std::vector<char> input(const XCase& c, int rank, int n, uint64_t seed) {
  const size_t elems = inElems(c, n), es = dtypeSize(c.t);
  if (c.type == CollType::ReduceScatter) return genBuf(c.t, c.op.kind, seed, rank, elems);
  std::vector<char> v(elems * es);
  for (size_t i = 0; i < v.size(); ++i) v[i] = char(mix(seed * 131 + uint64_t(rank) * 7 + i) >> 24);
  return v;
}

inline void call(Comm& comm, const XCase& c, const void* send, void* recv, const std::vector<void*>& rl,
          const std::vector<const void*>& sl, const CollOptions& co) {
  switch (c.type) {
    case CollType::AllGather:
      if (c.mode == kList) comm.allGatherList(send, rl, c.count, c.t, co);
      else comm.allGather(send, recv, c.count, c.t, co);
      break;
    case CollType::ReduceScatter:
      if (c.mode == kList) comm.reduceScatterList(sl, recv, c.count, c.t, c.op, co);
      else comm.reduceScatter(send, recv, c.count, c.t, c.op, co);
      break;
    case CollType::AllToAll: comm.allToAll(send, recv, c.count, c.t, co); break;
    case CollType::AllToAllV: comm.allToAllV(send, c.sc, recv, c.rc, c.t, co); break;
    default: MP_CHECK(false, "unexpected collective");
  }
}

// The twin's output: the same call on host buffers, out of place (in-place and overlapping calls
// mean the same result).
inline std::vector<char> twinResult(Comm& twin, const XCase& c, int n, const std::vector<char>& in) {
  std::vector<char> out(outElems(c, n) * dtypeSize(c.t));
  XCase h = c;
  h.mode = kOut;
  CollOptions co;
  co.hints = c.hints;
  call(twin, h, in.data(), out.data(), {}, {}, co);
  return out;
}

// Device buffers of a case (0xff everywhere, a guard byte past each output), the input copied in.
struct XBufs {
  std::vector<char*> allocs;
  char* send = nullptr;
  char* recv = nullptr;
  std::vector<void*> rl;        // all-gather list outputs
  std::vector<const void*> sl;  // reduce-scatter list inputs
  size_t inBytes = 0, outBytes = 0, block = 0;
  const XCase& c;
  int rank, n;

  char* alloc(size_t bytes) {
    allocs.push_back(poisoned(bytes + c.offset + 16));
    return allocs.back() + c.offset;
  }
  XBufs(const XCase& cs, int r, int size, const std::vector<char>& in) : c(cs), rank(r), n(size) {
    const size_t es = dtypeSize(c.t), N = size_t(n);
    inBytes = inElems(c, n) * es;
    outBytes = outElems(c, n) * es;
    block = c.count * es;
    switch (c.mode) {
      case kOut:
        send = alloc(inBytes);
        recv = alloc(outBytes);
        break;
      case kInPlace:  // the conventions: AG input = own output block, RS output = own input block
        if (c.type == CollType::AllGather) {
          recv = alloc(outBytes);
          send = recv + size_t(rank) * block;
        } else if (c.type == CollType::ReduceScatter) {
          send = alloc(inBytes);
          recv = send + size_t(rank) * block;
        } else {
          send = recv = alloc(std::max(inBytes, outBytes));
        }
        break;
      case kList:
        if (c.type == CollType::AllGather) {
          send = alloc(inBytes);
          for (size_t r = 0; r < N; ++r) rl.push_back(alloc(block));
        } else {
          recv = alloc(outBytes);
          for (size_t r = 0; r < N; ++r) sl.push_back(alloc(block));
        }
        break;
      case kOverlap:  // overlapping another block than the in-place convention's
        if (c.type == CollType::AllGather) {
          recv = alloc(outBytes);
          send = recv + size_t((rank + 1) % n) * block;
        } else if (c.type == CollType::ReduceScatter) {
          send = alloc(inBytes);
          recv = send + size_t((rank + 1) % n) * block;
        } else {
          send = alloc(inBytes + block);
          recv = send + block;
        }
        break;
    }
    load(in, nullptr);
    CK(cudaDeviceSynchronize());
  }
  ~XBufs() {
    for (char* p : allocs) (void)cudaFree(p);  // the allocations themselves (the buffers are p + c.offset)
  }
  XBufs(const XBufs&) = delete;
  // Copies the input in (stream s, or synchronously) and poisons the outputs that are not input.
  void load(const std::vector<char>& in, cudaStream_t s) {
    auto put = [&](void* dst, const void* src, size_t b) {
      if (s) CK(cudaMemcpyAsync(dst, src, b, cudaMemcpyHostToDevice, s));
      else CK(cudaMemcpy(dst, src, b, cudaMemcpyHostToDevice));
    };
    if (c.mode != kOut && c.mode != kList && s) CK(cudaMemsetAsync(recv, 0xff, outBytes, s));
    if (c.mode == kOut && s) CK(cudaMemsetAsync(recv, 0xff, outBytes, s));
    if (c.mode == kList && c.type == CollType::ReduceScatter) {
      for (size_t r = 0; r < sl.size(); ++r) put(const_cast<void*>(sl[r]), in.data() + r * block, block);
      if (s) CK(cudaMemsetAsync(recv, 0xff, outBytes, s));
      return;
    }
    if (c.mode == kList && s)
      for (void* p : rl) CK(cudaMemsetAsync(p, 0xff, block, s));
    put(send, in.data(), inBytes);
  }
  // The output as the twin lays it out, and whether every guard byte is intact.
  std::vector<char> output(bool& guards) const {
    guards = true;
    if (c.mode == kList && c.type == CollType::AllGather) {
      std::vector<char> out;
      for (void* p : rl) {
        std::vector<char> b = d2h(p, block + 1);
        guards = guards && uint8_t(b.back()) == 0xff;
        out.insert(out.end(), b.begin(), b.end() - 1);
      }
      return out;
    }
    const bool tail = c.mode == kOut || c.mode == kList;  // the output ends its allocation
    std::vector<char> out = d2h(recv, outBytes + (tail ? 1 : 0));
    if (tail) {
      guards = uint8_t(out.back()) == 0xff;
      out.pop_back();
    }
    return out;
  }
};

inline CollArgs argsOf(const XCase& c, const XBufs& b, const CollOptions& co) {
  CollArgs a;
  a.type = c.type;
  a.send = b.send;
  a.recv = b.recv;
  a.count = c.count;
  a.dtype = c.t;
  a.op = c.op;
  a.recvList = b.rl;
  a.sendList = b.sl;
  a.sendCounts = c.sc;
  a.recvCounts = c.rc;
  a.opts = co;
  return a;
}

inline void expectEqual(const XCase& c, const std::vector<char>& got, const std::vector<char>& want,
                 int rank, const char* what) {
  MP_CHECK(got.size() == want.size(), "%s: %zu output bytes, twin %zu", describe(c).c_str(),
           got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    MP_CHECK(got[i] == want[i], "%s (%s): rank %d byte %zu differs from the host twin (0x%02x vs 0x%02x)",
             describe(c).c_str(), what, rank, i, unsigned(uint8_t(got[i])), unsigned(uint8_t(want[i])));
}

inline void runCase(Comm& gpu, Comm& twin, const XCase& c, int rank, int n, uint64_t seed, cudaStream_t s) {
  const std::vector<char> in = input(c, rank, n, seed);
  XBufs b(c, rank, n, in);
  CollOptions co;
  co.stream = s;
  co.hints = c.hints;
  if (c.expect) {
    CollArgs a = argsOf(c, b, co);
    for (const auto& [k, v] : CommAccess::state(gpu).info.opts.hints) a.opts.hints.emplace(k, v);
    const std::string algo = CommAccess::state(gpu).backend->selectAllReduce(a);
    MP_CHECK(algo == c.expect, "%s: selection picked %s, not %s", describe(c).c_str(), algo.c_str(), c.expect);
  }
  call(gpu, c, b.send, b.recv, b.rl, b.sl, co);
  CK(cudaStreamSynchronize(s));
  bool guards = false;
  const std::vector<char> got = b.output(guards);
  MP_CHECK(guards, "%s: wrote past the end of an output", describe(c).c_str());
  expectEqual(c, got, twinResult(twin, c, n, in), rank, "single call");
}

inline const DataType kAllTypes[] = {DataType::f32, DataType::f64,     DataType::f16,     DataType::bf16,
                              DataType::i32, DataType::i64,     DataType::u32,     DataType::u64,
                              DataType::i8,  DataType::u8,      DataType::fp8_e4m3, DataType::fp8_e5m2};

// The cases of one forced variant ("flat": LL where it fits; "tree": pipelined).
inline std::vector<XCase> exchangeCases(const char* algo, const char* expect) {
  std::vector<XCase> v;
  auto add = [&](CollType ty, DataType t, ReduceOp op, size_t count, Mode m, size_t off) {
    XCase c;
    c.type = ty;
    c.t = t;
    c.op = op;
    c.count = count;
    c.mode = m;
    c.offset = off;
    c.hints = {{"algo", algo}};
    c.expect = m == kOverlap ? nullptr : expect;
    v.push_back(c);
  };
  for (CollType ty : {CollType::AllGather, CollType::AllToAll, CollType::ReduceScatter}) {
    const bool rs = ty == CollType::ReduceScatter;
    for (size_t i = 0; i < std::size(kAllTypes); ++i) {
      if (rs && (kAllTypes[i] == DataType::fp8_e4m3 || kAllTypes[i] == DataType::fp8_e5m2)) continue;
      add(ty, kAllTypes[i], RedOpKind::SUM, 1031 + 7 * i, (i % 3 == 1) ? kInPlace : kOut, 0);
    }
    add(ty, DataType::f32, RedOpKind::SUM, 1, kOut, 0);         // one element
    add(ty, DataType::f16, RedOpKind::SUM, 4099, kOut, 2);      // 2-byte aligned only
    add(ty, DataType::u8, RedOpKind::SUM, 333, kInPlace, 1);    // odd address, odd count
    add(ty, DataType::bf16, RedOpKind::SUM, 20011, kOut, 6);    // several rounds per block
    add(ty, DataType::f32, RedOpKind::SUM, 777, kOverlap, 0);   // the input staged first
    if (ty != CollType::AllToAll) add(ty, DataType::i32, RedOpKind::SUM, 515, kList, 0);
    if (rs) {
      for (DataType t : {DataType::f32, DataType::bf16, DataType::i32, DataType::f64}) {
        for (RedOpKind k : {RedOpKind::AVG, RedOpKind::PRODUCT, RedOpKind::MIN, RedOpKind::MAX})
          add(ty, t, k, 517, k == RedOpKind::MIN ? kInPlace : kOut, 0);
        if (isFloat(t)) add(ty, t, ReduceOp::premulSum(0.375), 517, kOut, 0);
        else
          for (RedOpKind k : {RedOpKind::BAND, RedOpKind::BOR, RedOpKind::BXOR}) add(ty, t, k, 333, kOut, 0);
      }
      add(ty, DataType::u64, RedOpKind::BXOR, 129, kList, 8);
      // A signed type's PRODUCT and bitwise ops run on its unsigned twin's kernel; its
      // PREMUL_SUM (a negative factor) and AVG (signed division) on its own.
      for (DataType t : {DataType::i8, DataType::i64}) {
        add(ty, t, RedOpKind::PRODUCT, 259, kOut, 0);
        add(ty, t, RedOpKind::BOR, 259, kOut, 0);
      }
      add(ty, DataType::i32, ReduceOp::premulSum(-3.0), 259, kOut, 0);
      add(ty, DataType::i64, RedOpKind::AVG, 259, kOut, 0);
    }
  }
  return v;
}

// All-to-all-v splits of rank `rank` in round `round`: zero pairs, unequal and odd counts, one
// rank sending nothing, all zero.
inline size_t split(int src, int dst, int round) {
  if (round == 0) return 0;
  if (round == 1 && src == 0) return 0;
  const size_t v = size_t((src * 7 + dst * 3 + round) % 5);
  if (round == 3 && src == 1 && dst == 0) return 20001;
  return v == 0 ? 0 : v * v * 37 + size_t(src) + size_t(dst);
}
inline std::vector<XCase> allToAllVCases(int rank, int n) {
  std::vector<XCase> v;
  for (int round = 0; round < 4; ++round)
    for (DataType t : {DataType::f32, DataType::u8, DataType::bf16, DataType::f64})
      for (Mode m : {kOut, kInPlace}) {
        XCase c;
        c.type = CollType::AllToAllV;
        c.t = t;
        c.mode = m;
        c.offset = t == DataType::u8 ? 3 : 0;
        c.expect = "pipelined";
        for (int p = 0; p < n; ++p) {
          c.sc.push_back(split(rank, p, round));
          c.rc.push_back(split(p, rank, round));
        }
        v.push_back(c);
      }
  return v;
}

inline void runSuite(bool small, const std::function<std::vector<XCase>(int, int)>& cases, uint64_t seed0) {
  runTwinRanksWith(sharedWorldSize(), [&](int rank, int size, std::shared_ptr<Store> store) {
    return gpuComm(rank, size, std::move(store), "colls", small);
  }, "twin", [&](TwinRank& r) {
    uint64_t seed = seed0;
    for (const XCase& c : cases(r.rank, r.size)) runCase(*r.gpu, *r.twin, c, r.rank, r.size, ++seed, r.st.s);
  });
}

}  // namespace xchgtest

#endif  // CCLX_HAVE_CUDA
