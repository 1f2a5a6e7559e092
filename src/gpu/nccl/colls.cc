// Every collective through NCCL. Grouped point to point (SendRecv, onto which Comm lowers
// scatter, gather, all-gather-v and all-to-all lists) is one ncclGroupStart/End of ncclSend /
// ncclRecv; reduce-scatter-v one group of ncclReduce. FP8 types move as bytes (no reductions on them); PREMUL_SUM uses
// ncclRedOpCreatePreMulSum with the factor as a host scalar of the element type. Overlapping
// buffers that NCCL cannot take directly (all-to-all in place, reduce-scatter/all-gather with
// send == recv) go through a stream-ordered temporary (cudaMallocAsync: legal in graph capture).
// Every NCCL result goes through ncclCall (table.h): errors name the call, ncclInProgress is
// bounded by the call's timeout. No CUDA API here: copies and temporaries are stream_ops.h.
#include "gpu/nccl/colls.h"

#include <cstring>
#include <memory>
#include <vector>

#include "core/elements/dtype_math.h"
#include "base/error.h"
#include "gpu/nccl/stream_ops.h"
#include "gpu/nccl/table.h"

namespace cclx {

using namespace nccl;

ncclDataType_t ncclType(DataType t) {
  switch (t) {
    case DataType::f32: return ncclFloat32;
    case DataType::f64: return ncclFloat64;
    case DataType::f16: return ncclFloat16;
    case DataType::bf16: return ncclBfloat16;
    case DataType::i8: return ncclInt8;
    case DataType::u8: return ncclUint8;
    case DataType::i32: return ncclInt32;
    case DataType::i64: return ncclInt64;
    case DataType::u32: return ncclUint32;
    case DataType::u64: return ncclUint64;
    case DataType::fp8_e4m3:
    case DataType::fp8_e5m2: return ncclUint8;  // data movement only
  }
  CCLX_THROW(cclxInvalidArgument, "unknown dtype %d", int(t));
}

namespace {

// An NCCL reduction op for one call; PREMUL_SUM ops are destroyed once the call is enqueued.
class NcclOp {
 public:
  NcclOp(const ReduceOp& op, DataType t, ncclComm_t comm) : comm_(comm) {
    switch (op.kind) {
      case RedOpKind::SUM: op_ = ncclSum; break;
      case RedOpKind::PRODUCT: op_ = ncclProd; break;
      case RedOpKind::MIN: op_ = ncclMin; break;
      case RedOpKind::MAX: op_ = ncclMax; break;
      case RedOpKind::AVG: op_ = ncclAvg; break;
      case RedOpKind::PREMUL_SUM: {
        unsigned char scalar[8] = {};
        double f = op.factor;
        auto put = [&](auto v) { std::memcpy(scalar, &v, sizeof(v)); };
        switch (t) {
          case DataType::f32: put(float(f)); break;
          case DataType::f64: put(f); break;
          case DataType::f16: put(math::f32ToF16(float(f))); break;
          case DataType::bf16: put(math::f32ToBf16(float(f))); break;
          case DataType::i8: put(int8_t(f)); break;
          case DataType::u8: put(uint8_t(f)); break;
          case DataType::i32: put(int32_t(f)); break;
          case DataType::u32: put(uint32_t(f)); break;
          case DataType::i64: put(int64_t(f)); break;
          case DataType::u64: put(uint64_t(f)); break;
          default: CCLX_THROW(cclxInvalidArgument, "PREMUL_SUM on %s", dtypeName(t));
        }
        ncclCheck(ncclLib().redOpCreatePreMulSum(&op_, scalar, ncclType(t), ncclScalarHostImmediate,
                                                 comm),
                  "ncclRedOpCreatePreMulSum", comm);
        custom_ = true;
        break;
      }
      default:
        CCLX_THROW(cclxUnsupported, "NCCL has no %s reduction (bitwise ops need peer memory)",
                   opName(op.kind));
    }
  }
  ~NcclOp() {
    if (custom_) (void)ncclLib().redOpDestroy(op_, comm_);
  }
  ncclRedOp_t get() const { return op_; }

 private:
  ncclComm_t comm_;
  ncclRedOp_t op_ = ncclSum;
  bool custom_ = false;
};

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an && bn && x < y + bn && y < x + an;
}

struct Group {
  Group(ncclComm_t c, NcclDeadline d) : comm(c), deadline(d) {
    ncclCheck(ncclLib().groupStart(), "ncclGroupStart", c);
  }
  void end() {
    if (open) {
      open = false;
      ncclCall(ncclLib().groupEnd(), "ncclGroupEnd", comm, deadline);
    }
  }
  ~Group() {
    if (open) (void)ncclLib().groupEnd();  // after a failed call inside: close it, keep that error
  }
  ncclComm_t comm;
  NcclDeadline deadline;
  bool open = true;
};

// A stream-ordered temporary, freed on the same stream after its users.
struct Temp {
  Temp(size_t bytes, ncclStream_t s) : stream(s) {
    if (bytes) p = static_cast<char*>(ncclstream::allocTemp(bytes, s));
  }
  ~Temp() {
    if (p) ncclstream::freeTemp(p, stream);
  }
  char* p = nullptr;
  ncclStream_t stream;
};

}  // namespace

void ncclRunCollective(const CollArgs& a, ncclComm_t c, int rank, int size, ncclStream_t s) {
  const NcclLib& L = ncclLib();
  const NcclDeadline dl = ncclDeadlineAfter(a.opts.timeout);
  CCLX_REQUIRE(c, cclxAborted, "the NCCL communicator was aborted");
  const ncclDataType_t t = ncclType(a.dtype);
  const size_t es = dtypeSize(a.dtype), n = size_t(size), bytes = a.count * es;
  const int me = rank;
  const char* send = static_cast<const char*>(a.send);
  char* recv = static_cast<char*>(a.recv);
  switch (a.type) {
    case CollType::AllReduce: {
      NcclOp op(a.op, a.dtype, c);
      ncclCall(L.allReduce(send, recv, a.count, t, op.get(), c, s), "ncclAllReduce", c, dl);
      return;
    }
    case CollType::Reduce: {
      NcclOp op(a.op, a.dtype, c);
      ncclCall(L.reduce(send, recv, a.count, t, op.get(), a.root, c, s), "ncclReduce", c, dl);
      return;
    }
    case CollType::Broadcast:
      ncclCall(L.broadcast(send, recv, a.count, t, a.root, c, s), "ncclBroadcast", c, dl);
      return;
    case CollType::AllGather: {
      if (!a.recvList.empty()) {  // one broadcast per source rank into its own buffer
        Group g(c, dl);
        for (int r = 0; r < int(n); ++r)
          ncclCall(L.broadcast(r == me ? send : nullptr, a.recvList[r], a.count, t, r, c, s),
                   "ncclBroadcast", c, dl);
        g.end();
        return;
      }
      char* slot = recv + me * bytes;
      if (send != slot && overlaps(send, bytes, recv, n * bytes)) {
        ncclstream::copy(slot, send, bytes, s);
        send = slot;
      }
      ncclCall(L.allGather(send, recv, a.count, t, c, s), "ncclAllGather", c, dl);
      return;
    }
    case CollType::ReduceScatter: {
      NcclOp op(a.op, a.dtype, c);
      if (!a.sendList.empty()) {  // one reduce per destination rank
        Group g(c, dl);
        for (int r = 0; r < int(n); ++r)
          ncclCall(L.reduce(a.sendList[r], r == me ? recv : nullptr, a.count, t, op.get(), r, c, s),
                   "ncclReduce", c, dl);
        g.end();
        return;
      }
      if (recv != send + me * bytes && overlaps(send, n * bytes, recv, bytes)) {
        Temp tmp(bytes, s);
        ncclCall(L.reduceScatter(send, tmp.p, a.count, t, op.get(), c, s), "ncclReduceScatter", c,
                 dl);
        ncclstream::copy(recv, tmp.p, bytes, s);
        return;
      }
      ncclCall(L.reduceScatter(send, recv, a.count, t, op.get(), c, s), "ncclReduceScatter", c, dl);
      return;
    }
    case CollType::AllToAll:
    case CollType::AllToAllV: {
      std::vector<size_t> sOff(n + 1, 0), rOff(n + 1, 0);
      for (size_t r = 0; r < n; ++r) {
        size_t sc = a.type == CollType::AllToAll ? a.count : a.sendCounts[r];
        size_t rc = a.type == CollType::AllToAll ? a.count : a.recvCounts[r];
        sOff[r + 1] = sOff[r] + sc * es;
        rOff[r + 1] = rOff[r] + rc * es;
      }
      std::unique_ptr<Temp> tmp;
      if (overlaps(send, sOff[n], recv, rOff[n])) {
        tmp = std::make_unique<Temp>(sOff[n], s);
        ncclstream::copy(tmp->p, send, sOff[n], s);
        send = tmp->p;
      }
      Group g(c, dl);
      for (size_t r = 0; r < n; ++r) {
        size_t sb = sOff[r + 1] - sOff[r], rb = rOff[r + 1] - rOff[r];
        if (sb) ncclCall(L.send(send + sOff[r], sb / es, t, int(r), c, s), "ncclSend", c, dl);
        if (rb) ncclCall(L.recv(recv + rOff[r], rb / es, t, int(r), c, s), "ncclRecv", c, dl);
      }
      g.end();
      return;
    }
    case CollType::Send:
      ncclCall(L.send(send, a.count, t, a.root, c, s), "ncclSend", c, dl);
      return;
    case CollType::Recv:
      ncclCall(L.recv(recv, a.count, t, a.root, c, s), "ncclRecv", c, dl);
      return;
    case CollType::SendRecv: {
      // Messages to this rank itself are copies on the stream (Comm checked that they pair up
      // and overlap no other buffer); the rest is one NCCL group. Zero-count messages are
      // skipped on both sides alike.
      size_t k = 0;
      for (const P2PSend& m : a.sends) {
        if (m.peer != me) continue;
        while (a.recvs[k].peer != me) ++k;
        const P2PRecv& r = a.recvs[k++];
        if (m.count && r.buf != m.buf)
          ncclstream::copy(r.buf, m.buf, m.count * es, s);
      }
      Group g(c, dl);
      for (const P2PSend& m : a.sends)
        if (m.peer != me && m.count)
          ncclCall(L.send(m.buf, m.count, t, m.peer, c, s), "ncclSend", c, dl);
      for (const P2PRecv& m : a.recvs)
        if (m.peer != me && m.count)
          ncclCall(L.recv(m.buf, m.count, t, m.peer, c, s), "ncclRecv", c, dl);
      g.end();
      return;
    }
    case CollType::ReduceScatterV: {  // one reduce per destination rank, as the list variant
      NcclOp op(a.op, a.dtype, c);
      Group g(c, dl);
      for (int r = 0; r < int(n); ++r) {
        const size_t cnt = a.recvCounts[size_t(r)];
        if (cnt)
          ncclCall(L.reduce(a.sendList[size_t(r)], r == me ? recv : nullptr, cnt, t, op.get(), r, c, s),
                   "ncclReduce", c, dl);
      }
      g.end();
      return;
    }
    case CollType::Barrier:
    case CollType::AllToAllVDevice:         // lowered by the backend before NCCL runs it
    case CollType::ReduceScatterQuantized:  // lowered by the backend before NCCL runs it
    case CollType::AllReduceRmsNorm:  // the backend runs NCCL's allreduce + a norm kernel
      break;
  }
  CCLX_THROW(cclxInternalError, "ncclRunCollective: unexpected collective %s", collName(a.type));
}

}  // namespace cclx
