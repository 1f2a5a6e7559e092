// Shared declarations of the cclx._C extension (nanobind).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cclx/cclx.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cclx::py {

namespace nb = nanobind;

/// Any DLPack-capable array; read-only exports accepted (writability of outputs is checked by
/// the Python layer, which knows the producer).
using Array = nb::ndarray<nb::ro>;
/// A list of arrays (one per rank, or a batch).
using Arrays = std::vector<Array>;

void bindErrors(nb::module_& m);
void bindTypes(nb::module_& m);
void bindStore(nb::module_& m);
void bindComm(nb::module_& m);
void bindRendezvous(nb::module_& m);
/// MoeBuffer (moe.cc): the expert-parallel buffer of cclx.moe.Buffer.
void bindMoe(nb::module_& m);

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

/// The Python name of a reduction kind ("SUM", ..., "PREMUL_SUM"; "?" for an unknown one).
const char* redOpName(RedOpKind k);

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
/// Seconds from Python as a comm timeout: 0 = the default, very large = kInfiniteTimeout, else
/// msOf(seconds, what).
std::chrono::milliseconds timeoutOf(double seconds, const char* what);
/// The options of a new comm from Python (Comm.create, _create_comm): the timeout as timeoutOf
/// (named `timeoutWhat`), abort_on_error -1 = the default, else on when nonzero.
Options commOptions(const std::string& name, const std::string& backend, double timeout,
                    const char* timeoutWhat, const Hints& hints, int abortOnError);
/// The device of a new comm from Python; `op` names the call in the message of a bad type.
DeviceSpec deviceOf(const char* op, int devType, int devIndex);
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
/// A reduction's dtype: resolveDtype, then checkOp.
DataType reductionDtype(int code, const Array& first, const char* op, const ReduceOp& r);
/// The dtype of a collective with a root: resolveDtype, then checkRank of the root.
DataType rootedDtype(int code, const Array& first, const char* op, int root, const Comm& c);
/// `what` must have `want` elements.
void checkNumel(const char* op, const char* what, size_t got, size_t want);
/// "op: arg", the name of an argument in messages.
std::string msg(const char* op, const char* arg);
/// The list `what` must have one entry per rank of `c`.
void checkLength(const char* op, const char* what, size_t got, const Comm& c);
/// The input's `numel` elements must split evenly over the ranks of `c`.
void checkDivisible(const char* op, size_t numel, const Comm& c);

/// The input and output of a collective that may run in place.
struct InOut {
  View in, out;
};
/// `send` (named "tensor") and `recv` (named "output", of as many elements; none: `send`).
InOut inOrInPlace(const char* op, const Array& send, const std::optional<Array>& recv, DataType t,
                  const Comm& c);
/// `send` (named "input") and `recv` (named "output"), the sizes left to the caller.
InOut inputOutput(const char* op, const Array& send, const Array& recv, DataType t, const Comm& c);

/// Where entryPtrs checks the entries' element counts: after each entry's view, or after the
/// views of all entries.
enum class CountCheck { EachEntry, AfterViews };

/// The addresses of the list `list` (one entry per rank of `c`, each of `numel` elements of `t`);
/// entries are named "<list> entry" and "a(n) <list> entry" in messages.
template <typename Ptr>
std::vector<Ptr> entryPtrs(const char* op, const char* list, const Arrays& arrays,
                           size_t numel, DataType t, const Comm& c, CountCheck when) {
  checkLength(op, list, arrays.size(), c);
  const std::string entry = msg(op, (std::string(list) + " entry").c_str());
  const std::string counted =
      (std::strchr("aeiou", list[0]) ? "an " : "a ") + std::string(list) + " entry";
  std::vector<View> v;
  v.reserve(arrays.size());
  for (const Array& a : arrays) {
    v.push_back(viewOf(a, entry.c_str(), t, c));
    if (when == CountCheck::EachEntry) checkNumel(op, counted.c_str(), v.back().numel, numel);
  }
  std::vector<Ptr> ptrs;
  ptrs.reserve(v.size());
  for (const View& e : v) {
    if (when == CountCheck::AfterViews) checkNumel(op, counted.c_str(), e.numel, numel);
    ptrs.push_back(e.ptr);
  }
  return ptrs;
}

/// The call `fn(self, a..., options)` (a member function of `self`, or a callable taking it
/// first) to run once the options are known; the values of `a` are kept in it.
template <typename Fn, typename Self, typename... A>
auto deferCall(Fn fn, Self& self, A... a) {
  return [fn, &self, ... a = std::move(a)](const CollOptions& o) {
    return std::invoke(fn, self, a..., o);
  };
}

namespace detail {
template <typename Check>
struct CollCall;
template <typename L, typename R, typename Self, typename... A>
struct CollCall<R (L::*)(const char*, Self&, A...) const> {
  template <typename F>
  static auto wrap(const char* op, F check) {
    return [op, check](Self& self, A... a, bool async, uintptr_t stream, const Hints& hints,
                       double timeout) {
      auto issue = check(op, self, std::forward<A>(a)...);
      CollOptions o = collOpts(async, stream, hints, timeout);
      nb::gil_scoped_release nogil;
      return issue(o);
    };
  }
};
}  // namespace detail

/// Binds the collective `name` of `cls` (`op` in messages), taking `args` and then the trailing
/// options (async_op, stream, hints, timeout s). `check(op, self, args...)` checks the arguments
/// and returns the call (deferCall); the options are read after the checks, and the call runs
/// with the GIL released.
template <typename Cls, typename F, typename... Args>
Cls& defColl(Cls& cls, const char* name, const char* op, const char* doc, F check,
             const Args&... args) {
  return cls.def(name, detail::CollCall<decltype(&F::operator())>::wrap(op, std::move(check)),
                 args..., nb::arg("async_op"), nb::arg("stream"), nb::arg("hints"),
                 nb::arg("timeout"), doc);
}

}  // namespace cclx::py
