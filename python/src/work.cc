// Work: the handle on a collective in flight. Waits release the GIL.
#include "bindings.h"

#include <chrono>
#include <cstdint>

namespace cclx::py {

void bindWork(nb::module_& m) {
  nb::class_<Work>(m, "Work", "Handle on a collective in flight.")
      .def(
          "is_completed",
          [](Work& w) {
            nb::gil_scoped_release nogil;
            return w.isCompleted();
          },
          "Non-blocking poll; raises if the operation failed or timed out.")
      .def(
          "wait",
          [](Work& w, uintptr_t stream) {
            nb::gil_scoped_release nogil;
            w.wait(reinterpret_cast<void*>(stream));
          },
          nb::arg("stream") = 0, "CUDA: makes `stream` wait for the operation. CPU: blocks.")
      .def(
          "wait_blocking",
          [](Work& w, double timeout) {
            std::chrono::milliseconds t = msOf(timeout, "wait_blocking: timeout");
            nb::gil_scoped_release nogil;
            w.waitBlocking(t);
          },
          nb::arg("timeout") = 0.0,
          "Blocks until completion; CclxTimeoutError after `timeout` s (0 = comm timeout).");
}

}  // namespace cclx::py
