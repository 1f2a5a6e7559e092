// The entry points of libcclx_torchcomms.so. torchcomms' TorchCommFactory dlopens the library
// named by TORCHCOMMS_BACKEND_LIB_PATH_CCLX, calls create_dynamic_loader_cclx and compares
// get_supported_version() with its own TORCHCOMM_BACKEND_ABI_VERSION: this library reports the
// value of the torchcomms headers it was compiled against, so a torchcomms of another ABI refuses
// it by name instead of calling through a different vtable. cclx_torchcomms_build_info() tells
// cclx's Python package what it was built against (the route it picks, docs/design/torchcomms.md).
#include "torchcomms/backend.h"

#include <cstdio>

#ifndef CCLX_TORCHCOMMS_VERSION
#define CCLX_TORCHCOMMS_VERSION "unknown"
#endif

namespace {

torch::comms::TorchCommBackend* newComm() noexcept {
  try {
    return new cclx::tc::CclxBackend();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[cclx] cannot create the torchcomms backend: %s\n", e.what());
    return nullptr;
  }
}

void destroyComm(torch::comms::TorchCommBackend* comm) noexcept {
  try {
    delete comm;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[cclx] destroying the torchcomms backend: %s\n", e.what());
  } catch (...) {
  }
}

const char* supportedVersion() noexcept { return torch::comms::TORCHCOMM_BACKEND_ABI_VERSION; }

}  // namespace

extern "C" {

__attribute__((visibility("default"))) torch::comms::DynamicLoaderInterface
create_dynamic_loader_cclx() {
  torch::comms::DynamicLoaderInterface d{};
  d.new_comm = &newComm;
  d.destroy_comm = &destroyComm;
  d.get_supported_version = &supportedVersion;
  return d;
}

/// "torchcomms=<version>;abi=<TORCHCOMM_BACKEND_ABI_VERSION>": what this library was built for.
__attribute__((visibility("default"))) const char* cclx_torchcomms_build_info() {
  static const std::string info = std::string("torchcomms=") + CCLX_TORCHCOMMS_VERSION +
                                  ";abi=" + torch::comms::TORCHCOMM_BACKEND_ABI_VERSION;
  return info.c_str();
}

}  // extern "C"
