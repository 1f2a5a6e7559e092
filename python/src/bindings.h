// Shared declarations of the cclx._C extension (nanobind).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cclx/cclx.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace cclx::py {

namespace nb = nanobind;

/// Any DLPack-capable array; read-only exports accepted (writability of outputs is checked by
/// the Python layer, which knows the producer).
using Array = nb::ndarray<nb::ro>;

void bindErrors(nb::module_& m);
void bindTypes(nb::module_& m);
void bindStore(nb::module_& m);
void bindComm(nb::module_& m);
void bindRendezvous(nb::module_& m);

/// Throws cclx::Error(cclxInvalidArgument, msg) (becomes cclx.CclxInvalidArgument).
[[noreturn]] void argError(const std::string& msg);

/// A validated view of one array argument.
struct View {
  void* ptr = nullptr;
  size_t numel = 0;
  int devType = 0;  // DLPack device type
  int devId = 0;
};

/// Checks `a` (named `what` in messages) against the comm's device and element type:
/// contiguous, element size of `dtype`, on the comm's device. Returns pointer and element count.
View viewOf(const Array& a, const char* what, DataType dtype, const Comm& comm);

/// Element type of `a` from its DLPack dtype (override >= 0 wins after a size check).
DataType dtypeOf(const Array& a, int override, const char* what);

// ---- Comm and Work (comm.cc, comm_reduce.cc, comm_data.cc, work.cc)

using Hints = std::map<std::string, std::string>;
using CommClass = nb::class_<Comm>;

/// Docstring of the collectives that take the trailing options.
inline constexpr const char* kCollDoc =
    "Trailing arguments: async_op, stream (cudaStream_t as int), hints, timeout s.";

void bindWork(nb::module_& m);
/// all_reduce, reduce, reduce_scatter (single and list).
void bindReductions(CommClass& c);
/// broadcast, all_gather (single and list), all_to_all(_v), send, recv, barrier.
void bindDataMovement(CommClass& c);
/// send_recv (batches), scatter, gather(_single), all_gather_v, all_to_all_list,
/// reduce_scatter_v; set_timeout, set_hints, backend_version (comm_grouped.cc).
void bindGrouped(CommClass& c);
/// all_reduce_rmsnorm and its selection query (comm_fused.cc).
void bindFused(CommClass& c);
/// Window (put, signal, wait_signal, ...), Comm.new_window, alloc_shared (window.cc).
void bindWindow(nb::module_& m, CommClass& c);

/// `seconds` (named `what` in messages) as milliseconds, rounded up; must be finite and >= 0.
std::chrono::milliseconds msOf(double seconds, const char* what);
/// The trailing options of a collective (timeout in seconds, 0 = the comm's).
CollOptions collOpts(bool async, uintptr_t stream, const Hints& hints, double timeout);
/// A cclx dtype code from Python.
DataType checkedDtype(int code, const char* op);
/// The dtype code from Python, or (code < 0) the one DLPack reports for `first`.
DataType resolveDtype(int code, const Array& first, const char* op);
/// The reduction must be defined for `t`.
void checkOp(const char* op, const ReduceOp& r, DataType t);
/// `r` (named `what`) must be a rank of `c`.
void checkRank(const char* op, const char* what, int r, const Comm& c);
/// `what` must have `want` elements.
void checkNumel(const char* op, const char* what, size_t got, size_t want);
/// "op: arg", the name of an argument in messages.
std::string msg(const char* op, const char* arg);

}  // namespace cclx::py
