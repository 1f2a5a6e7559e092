// Run-time loading of libnccl, or librccl in HIP builds (see loader.h for the search order).
#include "gpu/nccl/loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/settings/config.h"
#include "base/error.h"
#include "base/log.h"
#include "gpu/nccl/table.h"

namespace cclx {

namespace {

// The library behind NCCL's API: NCCL on NVIDIA GPUs, RCCL (the same API and ABI) on AMD GPUs.
#if defined(CCLX_HAVE_HIP)
constexpr const char* kLib = "RCCL";
constexpr const char* kSoname = "librccl.so.1";
constexpr const char* kDevName = "librccl.so";
#else
constexpr const char* kLib = "NCCL";
constexpr const char* kSoname = "libnccl.so.2";
constexpr const char* kDevName = "libnccl.so";
#endif

template <class Fn>
bool loadSym(void* h, const char* name, Fn& out, bool required, std::string& missing) {
  out = reinterpret_cast<Fn>(dlsym(h, name));
  if (!out && required) missing += std::string(missing.empty() ? "" : ", ") + name;
  return out != nullptr;
}

// Fills `lib` from handle `h`; returns an empty string on success, else what is missing.
std::string bind(void* h, NcclLib& lib) {
  std::string missing;
  loadSym(h, "ncclGetVersion", lib.getVersion, true, missing);
  loadSym(h, "ncclGetUniqueId", lib.getUniqueId, true, missing);
  loadSym(h, "ncclCommInitRank", lib.commInitRank, true, missing);
  loadSym(h, "ncclCommDestroy", lib.commDestroy, true, missing);
  loadSym(h, "ncclCommAbort", lib.commAbort, true, missing);
  loadSym(h, "ncclCommFinalize", lib.commFinalize, false, missing);
  loadSym(h, "ncclCommGetAsyncError", lib.commGetAsyncError, true, missing);
  loadSym(h, "ncclGetErrorString", lib.getErrorString, true, missing);
  loadSym(h, "ncclGetLastError", lib.getLastError, false, missing);
  loadSym(h, "ncclAllReduce", lib.allReduce, true, missing);
  loadSym(h, "ncclReduce", lib.reduce, true, missing);
  loadSym(h, "ncclBroadcast", lib.broadcast, true, missing);
  loadSym(h, "ncclAllGather", lib.allGather, true, missing);
  loadSym(h, "ncclReduceScatter", lib.reduceScatter, true, missing);
  loadSym(h, "ncclSend", lib.send, true, missing);
  loadSym(h, "ncclRecv", lib.recv, true, missing);
  loadSym(h, "ncclGroupStart", lib.groupStart, true, missing);
  loadSym(h, "ncclGroupEnd", lib.groupEnd, true, missing);
  loadSym(h, "ncclRedOpCreatePreMulSum", lib.redOpCreatePreMulSum, true, missing);
  loadSym(h, "ncclRedOpDestroy", lib.redOpDestroy, true, missing);
  loadSym(h, "ncclCommRegister", lib.commRegister, false, missing);
  loadSym(h, "ncclCommDeregister", lib.commDeregister, false, missing);
  loadSym(h, "ncclMemAlloc", lib.memAlloc, false, missing);
  loadSym(h, "ncclMemFree", lib.memFree, false, missing);
  loadSym(h, "ncclCommWindowRegister", lib.commWindowRegister, false, missing);
  loadSym(h, "ncclCommWindowDeregister", lib.commWindowDeregister, false, missing);
  loadSym(h, "ncclPutSignal", lib.putSignal, false, missing);
  loadSym(h, "ncclSignal", lib.signal, false, missing);
  loadSym(h, "ncclWaitSignal", lib.waitSignal, false, missing);
  if (!missing.empty()) return "missing symbols: " + missing;
  int v = 0;
  if (lib.getVersion(&v) != nccl::ncclSuccess || v < 21900)
    return strFormat("version %d is older than 2.19", v);
  lib.version = v;
  return "";
}

struct Loader {
  NcclLib lib;
  std::string error;
  bool ok = false;

  bool tryHandle(void* h, const std::string& where, const char* how) {
    if (!h) return false;
    if (dlsym(h, "cclxDropinRealNccl")) {  // the cclx drop-in: never NCCL itself
      error += "\n  " + where + ": the cclx drop-in, not NCCL";
      dlclose(h);
      return false;
    }
    NcclLib l;
    std::string why = bind(h, l);
    if (!why.empty()) {
      error += "\n  " + where + ": " + why;
      dlclose(h);
      return false;
    }
    Dl_info info{};
    l.path = where;
    if (l.getVersion && dladdr(reinterpret_cast<void*>(l.getVersion), &info) && info.dli_fname)
      l.path = info.dli_fname;
    lib = l;
    ok = true;
    CCLX_INFO("%s %d.%d.%d loaded from %s (%s)", kLib, l.version / 10000, (l.version / 100) % 100,
              l.version % 100, lib.path.c_str(), how);
    return true;
  }
  bool tryPath(const std::string& p, const char* how) {
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      error += "\n  " + p + ": " + (e ? e : "dlopen failed");
      return false;
    }
    return tryHandle(h, p, how);
  }

  Loader() {
    // Fresh read: the Python package may set CCLX_NCCL_PIP_DIR after the first config() use.
    const Config cfg = Config::fromEnv();
    const std::string& forced = cfg.ncclPath;
    if (!forced.empty()) {
      // An explicit path is binding: no silent fallback to another library.
      if (!tryPath(forced, "CCLX_NCCL_PATH")) error = "CCLX_NCCL_PATH=" + forced + ":" + error;
      return;
    }
    // A process that runs the cclx drop-in: the NCCL it forwards to.
    if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_NOLOAD)) {
      using RealFn = void* (*)(const char**);
      auto real = reinterpret_cast<RealFn>(dlsym(h, "cclxDropinRealNccl"));
      if (!real) real = reinterpret_cast<RealFn>(dlsym(RTLD_DEFAULT, "cclxDropinRealNccl"));
      const char* path = nullptr;
      if (real && real(&path) && path) {
        dlclose(h);
        if (tryPath(path, "the NCCL behind the cclx drop-in")) return;
      } else if (tryHandle(h, kSoname, "already loaded")) {
        return;
      }
    }
    // Hand-off from the Python layer: the lib directory of the nvidia-nccl pip package.
    if (!cfg.ncclPipDir.empty())
      if (tryPath(cfg.ncclPipDir + "/" + kSoname, "nvidia-nccl pip package")) return;
    if (tryPath(kSoname, "system")) return;
    tryPath(kDevName, "system");
  }
};

Loader& loader() {
  static Loader* l = new Loader();  // intentionally never destroyed (used at exit by comms)
  return *l;
}

}  // namespace

const NcclLib& loadedNcclLib() {
  static std::once_flag once;
  std::call_once(once, [] { loader(); });
  Loader& l = loader();
  if (!l.ok)
    CCLX_THROW(cclxUnsupported, "no usable %s library found (set CCLX_NCCL_PATH); tried:%s", kLib,
               l.error.c_str());
  return l.lib;
}

}  // namespace cclx
