// src/torchcomms: cclx as a C++ torchcomms backend (libcclx_torchcomms.so, loaded by torchcomms
// through TORCHCOMMS_BACKEND_LIB_PATH_CCLX). This header: the translations between torchcomms'
// types (at::Tensor, torch::comms::ReduceOp, per-call options, c10d::Store) and cclx's, and the
// boundary guard that turns every exception into the std::runtime_error torchcomms' backends
// throw. docs/design/torchcomms.md has the route and the ABI coupling.
#pragma once

#include <cclx/cclx.hpp>
#include <comms/torchcomms/TorchCommBackend.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace cclx::tc {

namespace tcx = torch::comms;

/// One tensor as cclx sees it: pointer, element count and cclx type. Types cclx has no name for
/// travel as bytes (u8) where the op moves data only; complex types as pairs of their real type.
struct Buf {
  void* ptr = nullptr;
  size_t count = 0;
  DataType dtype = DataType::u8;
};

/// `t` for an op that moves data only: its own cclx type when it has one, else its bytes.
Buf dataBuf(const at::Tensor& t, const char* what);
/// `t` for a reduction with `op`: its cclx type (bool: u8, whose SUM is MAX and PRODUCT MIN as
/// in c10d; complex: pairs of floats for SUM / AVG / PREMUL_SUM). Throws for other types.
/// `premultiplied`: the caller multiplied the inputs by deviceFactor(op): the op is SUM.
Buf reduceBuf(const at::Tensor& t, const tcx::ReduceOp& op, ReduceOp* out, const char* what,
              bool premultiplied = false);
/// torchcomms' ReduceOp -> cclx's (PREMUL_SUM with its factor, a double or a one-element tensor,
/// read on the host).
ReduceOp reduceOp(const tcx::ReduceOp& op);
/// The factor of a PREMUL_SUM given as a one-element tensor on a GPU, else an undefined tensor.
/// The collectives never read such a factor on the host (the call may be in a CUDA graph
/// capture, and the read would wait for the device): they multiply their inputs by it on the
/// device (premultiply) and reduce with SUM, the order NCCL's PREMUL_SUM computes in.
at::Tensor deviceFactor(const tcx::ReduceOp& op);
/// `t` times the device factor `f` (in t's type) on the current stream: in place when
/// `inPlace`, else a new tensor; `t` itself when `f` is undefined.
at::Tensor premultiply(const at::Tensor& t, const at::Tensor& f, bool inPlace);
/// Throws unless `t` is contiguous and on `dev` (the comm's device).
void checkTensor(const at::Tensor& t, const at::Device& dev, const char* what);

/// torchcomms hints -> cclx hints: `cclx.KEY` / `cclx::KEY` (prefix dropped; cclx checks key and
/// value) and the plain keys of cclx's own table; the other keys are torchcomms' or another
/// backend's and are left out.
std::map<std::string, std::string> cclxHints(
    const std::unordered_map<std::string, std::string>& hints);
/// A hint key without its `cclx::` / `cclx.` prefix (*prefixed says whether it had one).
std::string cclxKey(const std::string& k, bool* prefixed = nullptr);

/// A cclx Store over a c10d::Store (torchcomms' CommOptions::store).
std::shared_ptr<Store> storeOver(c10::intrusive_ptr<c10d::Store> s);
/// The store for a comm created without one: under torchrun torch's store on
/// MASTER_ADDR:MASTER_PORT; one rank: a private cclx TcpStore; otherwise the cclx TcpStore on
/// MASTER_ADDR:MASTER_PORT (one per process, shared by its comms).
std::shared_ptr<Store> defaultStore(int rank, int size, std::chrono::milliseconds timeout);
/// (rank, size) from TORCHCOMM_RANK / TORCHCOMM_SIZE, else RANK / WORLD_SIZE, else (0, 1).
std::pair<int, int> rankSize();

/// Runs `fn`; any exception leaves as std::runtime_error("[cclx] " + message) (torchcomms
/// turns it into Python's RuntimeError, as for its own backends).
template <typename F>
auto guarded(const char* what, F&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    throw std::runtime_error("[cclx] " + (msg.rfind(what, 0) == 0 ? msg : what + (": " + msg)));
  } catch (...) {
    throw std::runtime_error(std::string("[cclx] ") + what + ": unknown exception");
  }
}

}  // namespace cclx::tc
