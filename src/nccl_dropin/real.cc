// Finding and opening the real NCCL (see real.h for the search order).
#include "nccl_dropin/real.h"

#include <dlfcn.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "base/error.h"
#include "base/log.h"
#include "core/settings/table.h"
#include "nccl_dropin/errors.h"

namespace cclx {
namespace dropin {

namespace {

std::string realPath(const std::string& p) {
  char buf[PATH_MAX];
  return ::realpath(p.c_str(), buf) ? std::string(buf) : p;
}

// CCLX_NCCL_PATH and CCLX_NCCL_PIP_DIR, each read on its own through its table entry (text:
// never malformed): a malformed CCLX_* variable elsewhere must not make every NCCL call throw out
// of the C ABI (comm creation reports it, see intercept.cc).
Config loaderSettings() {
  Config c;
  for (const char* name : {"CCLX_NCCL_PATH", "CCLX_NCCL_PIP_DIR"})
    settings::applyEnv(*settings::findEnv(name), c);
  return c;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// This library's own file, so that it is never taken for the real NCCL.
std::string selfPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&selfPath), &info) && info.dli_fname) return realPath(info.dli_fname);
  return "";
}

std::vector<std::string> globAll(const std::string& pattern) {
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.push_back(g.gl_pathv[i]);
  ::globfree(&g);
  return out;
}

std::string dirOf(const std::string& p) {
  size_t s = p.rfind('/');
  return s == std::string::npos ? "." : p.substr(0, s);
}

// libnccl.so* files already mapped into the process.
std::vector<std::string> loadedNccl() {
  std::vector<std::string> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        const char* n = info->dlpi_name;
        if (n && *n) {
          std::string s(n);
          size_t slash = s.rfind('/');
          if (s.compare(slash == std::string::npos ? 0 : slash + 1, 9, "libnccl.s") == 0)
            static_cast<std::vector<std::string>*>(data)->push_back(s);
        }
        return 0;
      },
      &out);
  return out;
}

class Loader {
 public:
  RealNccl lib;

  Loader() {
    const Config set = loaderSettings();
    const std::string ncclPath = set.ncclPath, pipDir = set.ncclPipDir;
    self_ = selfPath();
    if (!ncclPath.empty()) {  // binding: no fallback to another library
      if (!tryPath(ncclPath, "CCLX_NCCL_PATH")) finish("CCLX_NCCL_PATH=" + ncclPath + " is not usable");
      return;
    }
    std::vector<std::string> pip;
    if (!pipDir.empty()) pip.push_back(pipDir + "/libnccl.so.2");
    std::vector<std::string> prefixes;
    if (const char* venv = std::getenv("VIRTUAL_ENV")) prefixes.push_back(venv);
    prefixes.push_back(dirOf(dirOf(realPath("/proc/self/exe"))));
    for (const std::string& pre : prefixes)
      for (const std::string& p : globAll(pre + "/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2"))
        pip.push_back(p);
    for (const std::string& p : pip)
      if (tryPath(p, "nvidia-nccl pip package")) return;
    for (const std::string& p : loadedNccl())
      if (tryPath(p, "already loaded")) return;
    std::vector<std::string> dirs;
    if (const char* ld = std::getenv("LD_LIBRARY_PATH")) {
      std::string s = std::string(ld) + ":";
      for (size_t at = 0, c; (c = s.find(':', at)) != std::string::npos; at = c + 1)
        if (c > at) dirs.push_back(s.substr(at, c - at));
    }
    for (const char* d : {"/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/lib/x86_64-linux-gnu",
                          "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/usr/local/lib"})
      dirs.push_back(d);
    for (const std::string& d : dirs)
      if (exists(d + "/libnccl.so.2") && tryPath(d + "/libnccl.so.2", "system")) return;
    finish("no usable NCCL library found (set CCLX_NCCL_PATH)");
  }

 private:
  bool tryPath(const std::string& p, const char* how) {
    const std::string rp = realPath(p);
    if (!self_.empty() && rp == self_) {
      tried_ += "\n  " + p + ": the cclx drop-in itself";
      return false;
    }
    for (const std::string& t : seen_)
      if (t == rp) return false;
    seen_.push_back(rp);
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (!h) {
      const char* e = dlerror();
      tried_ += "\n  " + p + ": " + (e ? e : "dlopen failed");
      return false;
    }
    if (dlsym(h, "cclxDropinSetIntercept")) {  // another copy of the drop-in
      tried_ += "\n  " + p + ": a cclx drop-in, not NCCL";
      dlclose(h);
      return false;
    }
    RealNccl l;
#define CCLX_R(name, params, args) l.name = reinterpret_cast<decltype(l.name)>(dlsym(h, #name));
    CCLX_NCCL_RESULT_FUNCTIONS(CCLX_R, CCLX_R, CCLX_R)
#undef CCLX_R
#define CCLX_O(type, name, params, args, fallback) \
  l.name = reinterpret_cast<decltype(l.name)>(dlsym(h, #name));
    CCLX_NCCL_OTHER_FUNCTIONS(CCLX_O, CCLX_O)
#undef CCLX_O
    if (!l.ncclGetVersion || l.ncclGetVersion(&l.version) != nccl::ncclSuccess || !l.ncclCommInitRank) {
      tried_ += "\n  " + p + ": not an NCCL library";
      dlclose(h);
      return false;
    }
    l.handle = h;
    l.path = rp;
    l.how = how;
    lib = l;
    CCLX_INFO("NCCL drop-in: real NCCL %d.%d.%d from %s (%s)", l.version / 10000,
              (l.version / 100) % 100, l.version % 100, rp.c_str(), how);
    return true;
  }

  void finish(const std::string& what) {
    lib.error = what + "; tried:" + (tried_.empty() ? std::string(" nothing") : tried_);
    CCLX_WARN("NCCL drop-in: %s", lib.error.c_str());
  }

  std::string self_;
  std::string tried_;
  std::vector<std::string> seen_;
};

}  // namespace

namespace {
std::atomic<const RealNccl*> gInstalled{nullptr};
}  // namespace

const RealNccl& real() {
  if (const RealNccl* t = gInstalled.load(std::memory_order_acquire)) return *t;
  static Loader* l = new Loader();  // never destroyed: NCCL is used until the process ends
  return l->lib;
}

const RealNccl* installRealNccl(const RealNccl* table) { return gInstalled.exchange(table); }

ncclResult_t missing(const char* name) {
  const RealNccl& L = real();
  if (!L.handle) return fail(nccl::ncclSystemError, L.error);
  return fail(nccl::ncclInvalidUsage,
              strFormat("%s is not in the loaded NCCL %d (%s)", name, L.version, L.path.c_str()));
}

const char* errorName(ncclResult_t r) { return nccl::resultName(r); }

}  // namespace dropin
}  // namespace cclx
