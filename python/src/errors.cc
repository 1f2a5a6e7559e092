// cclx::Error -> Python exceptions. CclxError (a RuntimeError) is the base and carries `.code`
// (a cclxResult_t value); subclasses also derive from the matching builtin exception so callers
// can catch ValueError / TimeoutError / NotImplementedError as usual.
#include "bindings.h"

#include <utility>

namespace cclx::py {
namespace {

PyObject* gBase = nullptr;
PyObject* gInvalidArgument = nullptr;
PyObject* gTimeout = nullptr;
PyObject* gUsage = nullptr;
PyObject* gUnsupported = nullptr;

PyObject* makeClass(nb::module_& m, const char* name, const char* doc, PyObject* bases,
                    int code) {
  std::string qual = std::string("cclx.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qual.c_str(), doc, bases, nullptr);
  if (!cls) throw nb::python_error();
  Py_XDECREF(bases);
  nb::handle h(cls);
  h.attr("code") = code;
  h.attr("__module__") = "cclx";
  m.attr(name) = h;
  return cls;
}

PyObject* classFor(cclxResult_t code) {
  switch (code) {
    case cclxInvalidArgument: return gInvalidArgument;
    case cclxTimeout: return gTimeout;
    case cclxInvalidUsage:
    case cclxAborted: return gUsage;
    case cclxUnsupported: return gUnsupported;
    default: return gBase;
  }
}

}  // namespace

void argError(const std::string& msg) { throw Error(cclxInvalidArgument, msg); }

void bindErrors(nb::module_& m) {
  gBase = makeClass(m, "CclxError",
                    "Base of every cclx error. `code` is the cclxResult_t value (see cclx.Result).",
                    Py_BuildValue("(O)", PyExc_RuntimeError), cclxInternalError);
  gInvalidArgument = makeClass(
      m, "CclxInvalidArgument",
      "Invalid argument (wrong device, size, dtype/op, root...). Nothing was enqueued or written.",
      Py_BuildValue("(OO)", gBase, PyExc_ValueError), cclxInvalidArgument);
  gTimeout = makeClass(m, "CclxTimeoutError",
                       "A peer did not arrive within the timeout; the message names the ranks.",
                       Py_BuildValue("(OO)", gBase, PyExc_TimeoutError), cclxTimeout);
  gUsage = makeClass(m, "CclxUsageError",
                     "API misuse, e.g. a call on a communicator after finalize() or abort().",
                     Py_BuildValue("(O)", gBase), cclxInvalidUsage);
  gUnsupported = makeClass(m, "CclxUnsupportedError",
                           "A valid request this build or device cannot serve.",
                           Py_BuildValue("(OO)", gBase, PyExc_NotImplementedError),
                           cclxUnsupported);

  nb::enum_<cclxResult_t>(m, "Result", nb::is_arithmetic(), "cclx result codes (CclxError.code).")
      .value("Success", cclxSuccess)
      .value("InvalidArgument", cclxInvalidArgument)
      .value("InvalidUsage", cclxInvalidUsage)
      .value("Timeout", cclxTimeout)
      .value("SystemError", cclxSystemError)
      .value("CudaError", cclxCudaError)
      .value("NcclError", cclxNcclError)
      .value("RemoteError", cclxRemoteError)
      .value("InternalError", cclxInternalError)
      .value("Aborted", cclxAborted)
      .value("InProgress", cclxInProgress)
      .value("Unsupported", cclxUnsupported);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyObject* cls = classFor(e.code());
      PyObject* inst = PyObject_CallFunction(cls, "s", e.what());
      if (!inst) {  // e.g. a message that is not valid UTF-8
        PyErr_Clear();
        PyErr_SetString(cls, "cclx error (message could not be decoded)");
        return;
      }
      PyObject* code = PyLong_FromLong(static_cast<long>(e.code()));
      PyObject_SetAttrString(inst, "code", code);
      Py_XDECREF(code);
      PyErr_SetObject(cls, inst);
      Py_DECREF(inst);
    }
  });
}

}  // namespace cclx::py
