// Buffer registration on a comm (torchcomms' TorchComm.tensor_register / tensor_deregister):
// local calls that hand a buffer to the transport for zero-copy use (CUDA comms with an NCCL
// communicator: ncclCommRegister), tracked per comm so that mistakes are errors and finalize()
// releases what the application left registered.
#include "core/comm/comm_internal.h"
#include "base/error.h"
#include "base/log.h"

namespace cclx {

void* Backend::registerBuffer(void*, size_t) { return nullptr; }
void Backend::deregisterBuffer(void*) {}

void Comm::registerMemory(void* ptr, size_t bytes) {
  requireUsable(*st_, "tensor_register");
  CCLX_ARG_CHECK(ptr != nullptr, "tensor_register: the buffer is null");
  CCLX_ARG_CHECK(bytes > 0, "tensor_register: the buffer is empty");
  std::lock_guard<std::mutex> g(st_->regMu);
  const uintptr_t key = reinterpret_cast<uintptr_t>(ptr);
  auto it = st_->registered.find(key);
  CCLX_ARG_CHECK(it == st_->registered.end(),
                 "tensor_register: a buffer at %p (%zu bytes) is already registered on comm '%s'; "
                 "deregister it first",
                 ptr, it == st_->registered.end() ? size_t(0) : it->second.first, name().c_str());
  void* handle = st_->backend->registerBuffer(ptr, bytes);
  st_->registered.emplace(key, std::make_pair(bytes, handle));
}

void Comm::deregisterMemory(void* ptr, size_t bytes) {
  requireUsable(*st_, "tensor_deregister");
  std::lock_guard<std::mutex> g(st_->regMu);
  auto it = st_->registered.find(reinterpret_cast<uintptr_t>(ptr));
  CCLX_ARG_CHECK(it != st_->registered.end(),
                 "tensor_deregister: no buffer at %p is registered on comm '%s'", ptr,
                 name().c_str());
  CCLX_ARG_CHECK(it->second.first == bytes,
                 "tensor_deregister: the buffer at %p was registered with %zu bytes, not %zu", ptr,
                 it->second.first, bytes);
  void* handle = it->second.second;
  st_->registered.erase(it);
  if (handle) st_->backend->deregisterBuffer(handle);
}

size_t Comm::registeredCount() const {
  std::lock_guard<std::mutex> g(st_->regMu);
  return st_->registered.size();
}

void releaseRegistrations(CommState& st, bool healthy) {
  std::lock_guard<std::mutex> g(st.regMu);
  if (!st.registered.empty())
    CCLX_INFO("comm '%s': releasing %zu registered buffer(s)", st.info.opts.name.c_str(),
              st.registered.size());
  for (auto& [start, reg] : st.registered) {
    if (!healthy || !reg.second) continue;
    try {
      st.backend->deregisterBuffer(reg.second);
    } catch (const std::exception& e) {
      CCLX_WARN("deregistering the buffer at %p: %s", reinterpret_cast<void*>(start), e.what());
    }
  }
  st.registered.clear();
}

}  // namespace cclx
