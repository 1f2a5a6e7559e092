// Store / TcpStore: the rendezvous key-value store. Blocking calls release the GIL.
#include "bindings.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>


namespace cclx::py {
namespace {

using ms = std::chrono::milliseconds;

std::string bytesOf(nb::handle v) {
  if (nb::isinstance<nb::bytes>(v)) {
    nb::bytes b = nb::borrow<nb::bytes>(v);
    return std::string(b.c_str(), b.size());
  }
  if (nb::isinstance<nb::str>(v)) return nb::cast<std::string>(v);
  argError("Store: values must be bytes or str");
}

ms msOf(double seconds) {
  if (!(seconds >= 0)) argError("Store: timeout must be >= 0 seconds");
  return ms(static_cast<int64_t>(seconds * 1000.0));
}

}  // namespace

void bindStore(nb::module_& m) {
  nb::class_<Store>(m, "Store", "Key-value store used for rendezvous (keys str, values bytes).")
      .def(
          "set", [](Store& s, const std::string& k, nb::handle v) { s.set(k, bytesOf(v)); },
          nb::arg("key"), nb::arg("value"), "Stores `value` (bytes or str) under `key`.")
      .def(
          "get",
          [](Store& s, const std::string& k, double timeout) {
            std::string v;
            {
              nb::gil_scoped_release nogil;
              v = s.get(k, msOf(timeout));
            }
            return nb::bytes(v.data(), v.size());
          },
          nb::arg("key"), nb::arg("timeout") = 300.0,
          "Waits up to `timeout` seconds for `key`, then returns its value as bytes.")
      .def(
          "add",
          [](Store& s, const std::string& k, int64_t d) {
            nb::gil_scoped_release nogil;
            return s.add(k, d);
          },
          nb::arg("key"), nb::arg("delta"), "Atomically adds `delta`; returns the new value.")
      .def(
          "wait",
          [](Store& s, const std::vector<std::string>& keys, double timeout) {
            nb::gil_scoped_release nogil;
            s.wait(keys, msOf(timeout));
          },
          nb::arg("keys"), nb::arg("timeout") = 300.0,
          "Waits until every key exists (CclxTimeoutError lists the missing ones).")
      .def("check", &Store::check, nb::arg("key"), "True when `key` exists.")
      .def("erase", &Store::erase, nb::arg("key"), "Removes `key`.");

  nb::class_<TcpStore, Store>(
      m, "TcpStore",
      "TCP store. The server (is_server=True) listens on host:port (port 0 picks a free one,\n"
      "see .port); clients connect with retries until `timeout` seconds. All members present\n"
      "the same `job_id` and prove they hold the same `token` (None: CCLX_STORE_TOKEN, '' =\n"
      "none); a server refuses any other client. Without a token only loopback addresses\n"
      "are served (docs/design/rendezvous.md, 'Store authentication').")
      .def(nb::new_([](const std::string& host, int port, bool isServer, const std::string& jobId,
                       double timeout, std::optional<std::string> token) {
             if (port < 0 || port > 65535) argError("TcpStore: port must be in 0..65535");
             const std::string secret = token ? *token : defaultStoreToken();
             nb::gil_scoped_release nogil;
             return TcpStore::create(host, port, isServer, jobId, msOf(timeout), secret);
           }),
           nb::arg("host"), nb::arg("port"), nb::arg("is_server"), nb::arg("job_id") = "cclx",
           nb::arg("timeout") = 300.0, nb::arg("token") = nb::none())
      .def_prop_ro("port", &TcpStore::port, "The port the server listens on.");

  m.def("prefix_store", &prefixStore, nb::arg("store"), nb::arg("prefix"),
        "A view of `store` that prefixes every key with `prefix`.");
}

}  // namespace cclx::py
