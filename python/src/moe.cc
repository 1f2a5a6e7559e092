// MoeBuffer (include/cclx/moe.hpp): the expert-parallel buffer behind cclx.moe.Buffer. The calls
// take raw addresses (the Python layer checks the tensors once and passes data_ptr()s): the
// per-call cost is the argument conversion and the launch. Calls release the GIL.
#include "bindings.h"

#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <cclx/moe.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace cclx::py {

namespace {

MoeConfig configOf(size_t tokens, size_t hidden, int experts, int topk, int dtype, bool fp8,
                   int blocks, int chunk, int ring) {
  MoeConfig c;
  c.maxBlocks = blocks;
  c.chunkTokens = chunk;
  c.ringTokens = ring;
  c.maxTokensPerRank = tokens;
  c.hidden = hidden;
  c.numExperts = experts;
  c.topK = topk;
  c.dtype = DataType(dtype);
  c.fp8 = fp8;
  return c;
}

MoeOptions optionsOf(uintptr_t stream, double timeout) {
  MoeOptions o;
  o.stream = reinterpret_cast<void*>(stream);
  o.timeout = timeout > 0 ? msOf(timeout, "timeout") : std::chrono::milliseconds(0);
  return o;
}

}  // namespace

void bindMoe(nb::module_& m) {
  auto b = nb::class_<MoeBuffer>(m, "MoeBuffer",
                                 "The expert-parallel buffer (low level; see cclx.moe.Buffer).");
  b.def_static(
       "route",
       [](Comm& comm, size_t tokens, size_t hidden, int experts, int topk, int dtype, bool fp8,
          int blocks, int chunk, int ring) {
         std::string why;
         const MoeRoute r = MoeBuffer::route(
             comm, configOf(tokens, hidden, experts, topk, dtype, fp8, blocks, chunk, ring), &why);
         return std::make_pair(std::string(moeRouteName(r)), why);
       },
       nb::arg("comm"), nb::arg("max_tokens_per_rank"), nb::arg("hidden"), nb::arg("num_experts"),
       nb::arg("top_k"), nb::arg("dtype"), nb::arg("fp8"), nb::arg("num_sms") = 0,
       nb::arg("chunk_tokens") = 0, nb::arg("ring_tokens") = 0,
       "(route, why): 'kernels', 'host' or 'composed' (then why the kernels cannot run).")
      .def_static(
          "create",
          [](Comm& comm, size_t tokens, size_t hidden, int experts, int topk, int dtype,
             bool fp8, int blocks, int chunk, int ring) {
            std::shared_ptr<Comm> sp = comm.shared_from_this();
            nb::gil_scoped_release nogil;
            return MoeBuffer::create(
                sp, configOf(tokens, hidden, experts, topk, dtype, fp8, blocks, chunk, ring));
          },
          nb::arg("comm"), nb::arg("max_tokens_per_rank"), nb::arg("hidden"),
          nb::arg("num_experts"), nb::arg("top_k"), nb::arg("dtype"), nb::arg("fp8"),
          nb::arg("num_sms") = 0, nb::arg("chunk_tokens") = 0, nb::arg("ring_tokens") = 0,
          "Collective: allocates and maps the buffer.")
      .def(
          "dispatch",
          [](MoeBuffer& buf, uintptr_t x, uintptr_t ids, bool ids64, uintptr_t w, size_t tokens,
             uintptr_t stream, double timeout, bool recvLater) {
            MoeOptions o = optionsOf(stream, timeout);
            o.recvLater = recvLater;
            nb::gil_scoped_release nogil;
            buf.dispatch(reinterpret_cast<const void*>(x), reinterpret_cast<const void*>(ids),
                         ids64 ? DataType::i64 : DataType::i32,
                         reinterpret_cast<const float*>(w), tokens, o);
          },
          nb::arg("x"), nb::arg("ids"), nb::arg("ids64"), nb::arg("w"), nb::arg("tokens"),
          nb::arg("stream"), nb::arg("timeout"), nb::arg("recv_later") = false)
      .def(
          "dispatch_cached",
          [](MoeBuffer& buf, uintptr_t x, uintptr_t stream, double timeout, bool recvLater) {
            MoeOptions o = optionsOf(stream, timeout);
            o.recvLater = recvLater;
            nb::gil_scoped_release nogil;
            buf.dispatchCached(reinterpret_cast<const void*>(x), o);
          },
          nb::arg("x"), nb::arg("stream"), nb::arg("timeout"), nb::arg("recv_later") = false)
      .def(
          "dispatch_recv",
          [](MoeBuffer& buf, uintptr_t stream, double timeout) {
            const MoeOptions o = optionsOf(stream, timeout);
            nb::gil_scoped_release nogil;
            buf.dispatchRecv(o);
          },
          nb::arg("stream"), nb::arg("timeout"),
          "Collective: the receive of a dispatch sent with recv_later.")
      .def_prop_ro("recv_pending", &MoeBuffer::recvPending)
      .def(
          "combine",
          [](MoeBuffer& buf, uintptr_t eout, size_t rows, uintptr_t out, uintptr_t stream,
             double timeout) {
            const MoeOptions o = optionsOf(stream, timeout);
            nb::gil_scoped_release nogil;
            buf.combine(reinterpret_cast<const void*>(eout), rows, reinterpret_cast<void*>(out),
                        o);
          },
          nb::arg("expert_out"), nb::arg("rows"), nb::arg("out"), nb::arg("stream"),
          nb::arg("timeout"))
      .def(
          "destroy",
          [](MoeBuffer& buf) {
            nb::gil_scoped_release nogil;
            buf.destroy();
          },
          "Collective: every rank done, then the memory is unmapped and freed.")
      .def(
          "memory",
          [](nb::handle self, bool torch, int devId) -> nb::object {
            MoeBuffer& buf = nb::cast<MoeBuffer&>(self);
            if (!buf.data()) argError("cclx.moe.Buffer: the buffer was destroyed");
            size_t shape[1] = {buf.bytes()};
            const bool cpu = buf.comm()->device().type == DeviceSpec::CPU;
            const int32_t devType = cpu ? nb::device::cpu::value : nb::device::cuda::value;
            if (torch)
              return nb::cast(nb::ndarray<nb::pytorch, uint8_t, nb::ndim<1>>(
                  buf.data(), 1, shape, self, nullptr, nb::dtype<uint8_t>(), devType,
                  cpu ? 0 : devId));
            if (!cpu) argError("cclx.moe.Buffer: CUDA views need torch");
            return nb::cast(nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(buf.data(), 1, shape,
                                                                         self));
          },
          nb::arg("torch"), nb::arg("device_index"),
          "This rank's memory as a uint8 tensor (it keeps the buffer alive).")
      .def_prop_ro("bytes", &MoeBuffer::bytes)
      .def_prop_ro("blocks", &MoeBuffer::blocks)
      .def_prop_ro("chunk_tokens", &MoeBuffer::chunkTokens)
      .def_prop_ro("ring_rows", &MoeBuffer::ringRows)
      .def_prop_ro("ring_round", &MoeBuffer::ringRound)
      .def_prop_ro("last_tokens", &MoeBuffer::lastTokens)
      .def_prop_ro("route_name",
                   [](const MoeBuffer& buf) { return std::string(moeRouteName(buf.engineRoute())); })
      .def_prop_ro("offsets", [](const MoeBuffer& buf) {
        const MoeOutputs& o = buf.outputs();
        nb::dict d;
        d["recv_x"] = o.recvX;
        d["recv_x_row_bytes"] = o.recvXRowBytes;
        d["recv_scales"] = o.recvScales;
        d["recv_counts"] = o.recvCounts;
        d["expert_counts"] = o.expertCounts;
        d["expert_offsets"] = o.expertOffsets;
        d["entry_rows"] = o.entryRows;
        d["entry_cap"] = o.entryCap;
        d["slot_entries"] = o.slotEntries;
        d["slot_weights"] = o.slotWeights;
        d["tok_rows"] = o.tokRows;
        return d;
      });
}

}  // namespace cclx::py
