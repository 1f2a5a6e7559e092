"""The NCCL drop-in (libnccl.so.2) without a GPU: exported functions and SONAME, forwarding to
the real NCCL, the real NCCL's search order (shown with fake NCCL libraries and a C driver),
the per-thread group depth, and the cclx-nccl launcher."""
import glob
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import harness

try:
    from cclx import dropin

    LIB = dropin.library_path()
except FileNotFoundError as e:
    pytest.skip(f"the NCCL drop-in is not built (CUDA builds only): {e}", allow_module_level=True)

# torch 2.15's list of NCCL functions (ProcessGroupNCCL and its symmetric-memory code).
TORCH_NCCL = [
    "nccl" + n for n in """AllGather AllReduce Bcast Broadcast CommAbort CommCount CommRegister
    CommDeregister CommDestroy CommFinalize CommGetAsyncError CommInitAll CommInitRank
    CommInitRankConfig CommInitRankScalable CommSplit CommUserRank CommWindowRegister
    CommWindowDeregister GetErrorString GetLastError GetUniqueId GetVersion GroupStart GroupEnd
    GroupSimulateEnd MemAlloc MemFree Recv RedOpCreatePreMulSum RedOpDestroy Reduce ReduceScatter
    Send AlltoAll Gather CommShrink CommGrow CommGetUniqueId CommRevoke CommSuspend CommResume
    CommMemStats DevCommCreate DevCommDestroy GetPeerDevicePointer GetLsaMultimemDevicePointer
    PutSignal Signal WaitSignal WinGetUserPtr""".split()]

# Settings that steer the loader; every child starts without them.
_LOADER_ENV = ("CCLX_NCCL_PATH", "CCLX_NCCL_PIP_DIR", "VIRTUAL_ENV", "LD_LIBRARY_PATH",
               "LD_PRELOAD", "CCLX_NCCL_INTERCEPT", "CCLX_NCCL_FORWARD", "CCLX_DEBUG")


def _need(*tools):
    for t in tools:
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed")


def _env(**extra):
    env = harness.child_env()
    for k in _LOADER_ENV:
        env.pop(k, None)
    env["LC_ALL"] = "C"  # dlerror() in English
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _pyenv(**extra):
    """_env for Python children, which may need LD_LIBRARY_PATH themselves."""
    env = _env(**extra)
    if "LD_LIBRARY_PATH" in os.environ and "LD_LIBRARY_PATH" not in extra:
        env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    return env


def _py(code, env, *args):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _functions(path):
    """Defined dynamic function symbols (nm types T, W, i) of a shared library."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "W", "i"):
            names.add(parts[2].split("@")[0])
    return names


def _real_nccl_files():
    """The machine's libnccl.so.2 files (CUDA toolkit, system, nvidia-nccl pip package)."""
    cands = ["/usr/local/cuda/lib64/libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2"]
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
              "/usr/lib", "/usr/local/lib"):
        cands.append(os.path.join(d, "libnccl.so.2"))
    if shutil.which("ldconfig"):
        r = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=60)
        cands += [ln.split("=>")[-1].strip() for ln in r.stdout.splitlines()
                  if "libnccl.so.2 " in ln and "=>" in ln]
    pip = dropin.pip_nccl_dir()
    if pip:
        cands.append(os.path.join(pip, "libnccl.so.2"))
    seen, out = set(), []
    for c in cands:
        rp = os.path.realpath(c)
        if os.path.isfile(rp) and rp not in seen and rp != LIB:
            seen.add(rp)
            out.append(rp)
    return out


# ---- (a) exports and SONAME ----

def test_exports_torch_list():
    _need("nm")
    missing = sorted(set(TORCH_NCCL) - _functions(LIB))
    assert not missing, f"{LIB} lacks functions torch 2.15 uses: {missing}"


def test_exports_every_real_nccl_function():
    _need("nm")
    reals = _real_nccl_files()
    if not reals:
        pytest.skip("no real libnccl.so.2 on this machine to compare with")
    mine = _functions(LIB)
    for real in reals:
        theirs = {n for n in _functions(real) if n.startswith("nccl")}
        assert theirs, f"{real} exports no nccl* function"
        missing = sorted(theirs - mine)
        assert not missing, f"{real} exports functions the drop-in lacks: {missing}"


def test_exports_nothing_else():
    _need("nm")
    extra = sorted(n for n in _functions(LIB) if not n.startswith(("nccl", "pnccl", "cclxDropin")))
    assert not extra, f"the drop-in exports more than nccl*/pnccl*/cclxDropin*: {extra[:40]}"
    assert {"cclxDropinSetIntercept", "cclxDropinGroupDepth",
            "cclxDropinRealNccl"} <= _functions(LIB)


def _addresses(path):
    """name -> address of the defined dynamic function symbols of a shared library."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return {p[2].split("@")[0]: p[0] for p in (ln.split() for ln in out.splitlines())
            if len(p) == 3 and p[1] in ("T", "W", "i")}


def test_exports_profiling_aliases():
    """NCCL's pnccl* names: every one the machine's NCCL exports, each the same function as the
    drop-in's nccl* (an alias, so a profiling tool's pnccl call still reaches the drop-in)."""
    _need("nm")
    mine = _addresses(LIB)
    pn = {n for n in mine if n.startswith("pnccl")}
    assert "pncclAllReduce" in pn and "pncclGroupSimulateEnd" in pn and "pncclCommAbort" in pn
    for n in pn:
        assert n[1:] in mine and mine[n] == mine[n[1:]], f"{n} is not an alias of {n[1:]}"
    for real in _real_nccl_files():
        theirs = {n for n in _functions(real) if n.startswith("pnccl")}
        missing = sorted(theirs - pn)
        assert not missing, f"{real} exports profiling names the drop-in lacks: {missing}"


def test_soname():
    _need("readelf")
    out = subprocess.run(["readelf", "-d", LIB], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert "Library soname: [libnccl.so.2]" in out, out


# ---- fake NCCL libraries and the C driver ----

_FAKE_C = r"""
typedef struct { char internal[128]; } ncclUniqueId;
int ncclGetVersion(int* v) { *v = VERSION; return 0; }
#ifndef NO_INIT
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) { return 0; }
#endif
#ifdef GROUP_RESULT
int ncclGroupStart(void) { return GROUP_RESULT; }
int ncclGroupEnd(void) { return 0; }
int ncclGroupSimulateEnd(void* info) { return 0; }
int ncclAllReduce(const void* s, void* r, unsigned long n, int t, int op, void* c, void* st) {
  return 0;
}
#endif
"""

# argv: the drop-in, then optionally a library to load RTLD_GLOBAL first ("already loaded").
_DRIVER_C = r"""
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char** argv) {
  if (argc > 2 && !dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL)) {
    fprintf(stderr, "preload: %s\n", dlerror());
    return 3;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 4;
  }
  int (*getVersion)(int*) = (int (*)(int*))dlsym(h, "ncclGetVersion");
  const char* (*lastError)(void*) = (const char* (*)(void*))dlsym(h, "ncclGetLastError");
  void* (*realNccl)(const char**) = (void* (*)(const char**))dlsym(h, "cclxDropinRealNccl");
  if (!getVersion || !lastError || !realNccl) return 5;
  int v = -1;
  int rc = getVersion(&v);
  const char* path = NULL;
  void* real = realNccl(&path);
  printf("rc=%d\nversion=%d\nreal=%s\nhandle=%d\nerror=%s\n", rc, v, path ? path : "(none)",
         real != NULL, rc ? lastError(NULL) : "");
  return 0;
}
"""

VERSIONS = {"path": 29901, "pip": 29902, "loaded": 29903, "sys": 29904, "venv": 29905,
            "prefix": 29906}


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    """Fake libnccl.so.2 files, each in a directory of its own, a copy of the drop-in, and the
    driver (in bin/ of a prefix without site-packages)."""
    _need("gcc")
    root = tmp_path_factory.mktemp("fake_nccl")
    src = root / "fake.c"
    src.write_text(_FAKE_C)
    f = {}

    def build(name, *defs, where=None):
        d = where or root / name
        d.mkdir(parents=True, exist_ok=True)
        out = d / "libnccl.so.2"
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", *defs, "-o",
                        str(out), str(src)], check=True, timeout=120)
        f[name] = str(out)

    for name, v in VERSIONS.items():
        if name not in ("venv", "prefix"):
            build(name, f"-DVERSION={v}")
    sp = "lib/python3.11/site-packages/nvidia/nccl/lib"
    build("venv", f"-DVERSION={VERSIONS['venv']}", where=root / "venv" / sp)
    build("prefix", f"-DVERSION={VERSIONS['prefix']}", where=root / "prefix" / sp)
    build("notnccl", "-DVERSION=29907", "-DNO_INIT")
    build("group_ok", "-DVERSION=29908", "-DGROUP_RESULT=0")
    build("group_fail", "-DVERSION=29909", "-DGROUP_RESULT=3")
    (root / "copy").mkdir()
    f["copy"] = str(root / "copy" / "libnccl.so.2")
    shutil.copy(LIB, f["copy"])
    (root / "driver.c").write_text(_DRIVER_C)
    (root / "bin").mkdir()
    f["driver"] = str(root / "bin" / "driver")
    subprocess.run(["gcc", "-o", f["driver"], str(root / "driver.c"), "-ldl"], check=True,
                   timeout=120)
    (root / "prefix" / "bin").mkdir()
    f["prefix_driver"] = str(root / "prefix" / "bin" / "driver")
    shutil.copy(f["driver"], f["prefix_driver"])  # a copy: /proc/self/exe resolves links
    f["root"] = str(root)
    return f


def _drive(fakes, env, preload=None, driver="driver"):
    cmd = [fakes[driver], LIB] + ([preload] if preload else [])
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    head, _, err = r.stdout.partition("error=")
    out = dict(ln.split("=", 1) for ln in head.splitlines())
    return {"rc": int(out["rc"]), "version": int(out["version"]), "real": out["real"],
            "handle": out["handle"] == "1", "error": err.strip(), "log": r.stderr}


def _dir(fakes, name):
    return os.path.dirname(fakes[name])


# ---- (c) the search order ----

# (case, environment, library loaded first, the fake that must be found)
ORDER = [
    ("path_first", {"CCLX_NCCL_PATH": "path", "CCLX_NCCL_PIP_DIR": "pip", "VIRTUAL_ENV": "venv",
                    "LD_LIBRARY_PATH": "sys"}, "loaded", "path"),
    ("pip_dir", {"CCLX_NCCL_PIP_DIR": "pip", "VIRTUAL_ENV": "venv", "LD_LIBRARY_PATH": "sys"},
     "loaded", "pip"),
    ("virtual_env", {"VIRTUAL_ENV": "venv", "LD_LIBRARY_PATH": "sys"}, "loaded", "venv"),
    ("already_loaded", {"LD_LIBRARY_PATH": "sys"}, "loaded", "loaded"),
    ("ld_library_path", {"LD_LIBRARY_PATH": "sys"}, None, "sys"),
    ("pip_dir_without_library_is_skipped", {"CCLX_NCCL_PIP_DIR": "notadir",
                                            "LD_LIBRARY_PATH": "sys"}, None, "sys"),
    ("copy_of_dropin_skipped", {"CCLX_NCCL_PIP_DIR": "copy", "LD_LIBRARY_PATH": "sys"}, None,
     "sys"),
    ("dropin_dir_skipped", {"LD_LIBRARY_PATH": "self:sys"}, None, "sys"),
]


def _order_env(fakes, spec):
    env = {}
    for k, v in spec.items():
        if k == "CCLX_NCCL_PATH":
            env[k] = fakes[v]
        elif k == "VIRTUAL_ENV":
            env[k] = os.path.join(fakes["root"], "venv")
        elif v == "notadir":
            env[k] = os.path.join(fakes["root"], "nowhere")
        else:
            env[k] = ":".join(os.path.dirname(LIB) if p == "self" else _dir(fakes, p)
                              for p in v.split(":"))
    return _env(**env)


@pytest.mark.parametrize("case,spec,preload,want", ORDER, ids=[o[0] for o in ORDER])
def test_search_order(fakes, case, spec, preload, want):
    d = _drive(fakes, _order_env(fakes, spec), fakes[preload] if preload else None)
    assert d["rc"] == 0, d
    assert d["version"] == VERSIONS[want], d
    assert d["real"] == os.path.realpath(fakes[want]) and d["handle"], d


def test_search_order_executable_prefix(fakes):
    """site-packages under the running executable's prefix, before an already loaded NCCL."""
    env = _env(LD_LIBRARY_PATH=_dir(fakes, "sys"))
    d = _drive(fakes, env, fakes["loaded"], driver="prefix_driver")
    assert d["version"] == VERSIONS["prefix"], d
    assert d["real"] == os.path.realpath(fakes["prefix"]), d
    # The driver outside that prefix does not see it.
    assert _drive(fakes, env, fakes["loaded"])["version"] == VERSIONS["loaded"]


def test_system_default_is_a_real_nccl(fakes):
    """No setting: the system rule finds the machine's NCCL (or nothing, with the reason)."""
    d = _drive(fakes, _env())
    if d["rc"] != 0:
        assert d["rc"] == 2 and "no usable NCCL" in d["error"] and not d["handle"], d
        return
    assert d["handle"] and os.path.isfile(d["real"]) and d["real"] != LIB, d
    assert d["version"] >= 20000 and d["version"] not in VERSIONS.values(), d


@pytest.mark.parametrize("bad", ["missing", "notnccl", "copy", "self"])
def test_nccl_path_is_binding(fakes, bad):
    """CCLX_NCCL_PATH that is not usable: every call fails with ncclSystemError naming the
    path and what was tried, although every other rule would find a library."""
    path = {"missing": os.path.join(fakes["root"], "no", "libnccl.so.2"), "self": LIB}.get(
        bad) or fakes[bad]
    env = _env(CCLX_NCCL_PATH=path, CCLX_NCCL_PIP_DIR=_dir(fakes, "pip"),
               LD_LIBRARY_PATH=_dir(fakes, "sys"))
    d = _drive(fakes, env, fakes["loaded"])
    assert d["rc"] == 2 and d["version"] == -1, d
    assert d["real"] == "(none)" and not d["handle"], d
    assert f"CCLX_NCCL_PATH={path} is not usable" in d["error"] and "tried" in d["error"], d
    why = {"missing": "No such file", "notnccl": "not an NCCL library",
           "copy": "a cclx drop-in, not NCCL", "self": "the cclx drop-in itself"}[bad]
    assert why in d["error"], d


# ---- (b) forwarding with ctypes ----

_FORWARD_PY = """
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
path = ctypes.c_char_p()
lib.cclxDropinRealNccl.restype = ctypes.c_void_p
lib.cclxDropinRealNccl.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
lib.ncclGetErrorString.restype = ctypes.c_char_p
lib.ncclGetLastError.restype = ctypes.c_char_p
lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
v = ctypes.c_int(-1)
rc = lib.ncclGetVersion(ctypes.byref(v))
out = {"rc": rc, "version": v.value, "strings": [lib.ncclGetErrorString(i).decode()
                                                 for i in range(8)]}
out["handle"] = bool(lib.cclxDropinRealNccl(ctypes.byref(path)))
out["real"] = path.value.decode() if path.value else None
if len(sys.argv) > 2:  # functions the loaded NCCL lacks
    n = ctypes.c_int(-1)
    out["count_rc"] = lib.ncclCommCount(None, ctypes.byref(n))
    out["count_err"] = lib.ncclGetLastError(None).decode()
    out["allreduce_rc"] = lib.ncclAllReduce(None, None, 1, 7, 0, None, None)
    out["allreduce_err"] = lib.ncclGetLastError(None).decode()
    out["version_err"] = lib.ncclGetVersion(ctypes.byref(v))
    out["after_success"] = (lib.ncclGetLastError(None) or b"").decode()
print(json.dumps(out))
"""

_REAL_PY = """
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
lib.ncclGetErrorString.restype = ctypes.c_char_p
v = ctypes.c_int(-1)
rc = lib.ncclGetVersion(ctypes.byref(v))
print(json.dumps({"rc": rc, "version": v.value,
                  "strings": [lib.ncclGetErrorString(i).decode() for i in range(8)]}))
"""


def test_forwards_to_real_nccl():
    got = json.loads(_py(_FORWARD_PY, _pyenv(), LIB))
    if not got["handle"]:
        pytest.skip("no real NCCL on this machine for the drop-in to load")
    assert got["real"] != LIB and os.path.isfile(got["real"]), got
    want = json.loads(_py(_REAL_PY, _pyenv(), got["real"]))
    assert want["rc"] == 0 and got["rc"] == 0
    assert got["version"] == want["version"] and got["version"] >= 20000
    assert got["strings"] == want["strings"]


def test_forwards_to_nccl_path():
    reals = _real_nccl_files()
    if not reals:
        pytest.skip("no real libnccl.so.2 on this machine")
    for real in reals:
        got = json.loads(_py(_FORWARD_PY, _pyenv(CCLX_NCCL_PATH=real), LIB))
        want = json.loads(_py(_REAL_PY, _pyenv(), real))
        assert got["real"] == real and got["version"] == want["version"], (real, got, want)
        assert got["strings"] == want["strings"]


def test_function_missing_from_loaded_nccl(fakes):
    got = json.loads(_py(_FORWARD_PY, _pyenv(CCLX_NCCL_PATH=fakes["path"]), LIB, "missing"))
    assert got["rc"] == 0 and got["version"] == VERSIONS["path"] and got["real"] == fakes["path"]
    assert got["count_rc"] == 5 and got["allreduce_rc"] == 5, got  # ncclInvalidUsage
    for key, name in (("count_err", "ncclCommCount"), ("allreduce_err", "ncclAllReduce")):
        assert f"{name} is not in the loaded NCCL {VERSIONS['path']}" in got[key], got
        assert fakes["path"] in got[key], got
    # The fake has no ncclGetErrorString: the drop-in names the codes itself.
    assert got["strings"][5] == "invalid usage" and got["strings"][0] == "no error", got
    assert got["version_err"] == 0 and got["after_success"] == "", got  # a call clears it


_BAD_SETTING_PY = """
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
lib.ncclGetLastError.restype = ctypes.c_char_p
lib.ncclGetLastError.argtypes = [ctypes.c_void_p]
v = ctypes.c_int(-1)
rc = lib.ncclGetVersion(ctypes.byref(v))
comm = ctypes.c_void_p()
init = lib.ncclCommInitRank(ctypes.byref(comm), 1, (ctypes.c_char * 128)(), 0)
print(json.dumps({"rc": rc, "version": v.value, "init": init,
                  "err": lib.ncclGetLastError(None).decode()}))
"""


def test_malformed_setting_fails_comm_creation_only(fakes):
    """A malformed CCLX_* setting: ncclGetVersion still works, ncclCommInitRank fails with
    ncclInvalidArgument (4) naming the setting."""
    env = _pyenv(CCLX_NCCL_PATH=fakes["path"], CCLX_TIMEOUT_MS="abc")
    got = json.loads(_py(_BAD_SETTING_PY, env, LIB))
    assert got["rc"] == 0 and got["version"] == VERSIONS["path"], got
    assert got["init"] == 4 and "CCLX_TIMEOUT_MS" in got["err"], got


# ---- (d) group depth ----

_GROUP_PY = """
import ctypes, json, os, sys, threading
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
steps = []
for step in sys.argv[2]:
    rc = (lib.ncclGroupStart if step == "S" else lib.ncclGroupEnd)()
    other = []
    t = threading.Thread(target=lambda: other.append(lib.cclxDropinGroupDepth()))
    t.start()
    t.join()
    steps.append([step, rc, lib.cclxDropinGroupDepth(), other[0]])
print(json.dumps(steps))
"""


def _group(env):
    return json.loads(_py(_GROUP_PY, env, LIB, "SSEEE"))


def _check_depths(steps):
    expected = 0
    for step, rc, depth, other in steps:
        if step == "S" and rc == 0:
            expected += 1
        elif step == "E":
            expected = max(0, expected - 1)
        assert depth == expected and depth >= 0, steps
        assert other == 0, steps  # the depth is the calling thread's


def test_group_depth_real_nccl():
    steps = _group(_pyenv())
    _check_depths(steps)


def test_group_depth_fakes(fakes):
    ok = _group(_pyenv(CCLX_NCCL_PATH=fakes["group_ok"]))
    _check_depths(ok)
    assert [s[2] for s in ok] == [1, 2, 1, 0, 0], ok
    bad = _group(_pyenv(CCLX_NCCL_PATH=fakes["group_fail"]))
    _check_depths(bad)
    assert [s[1] for s in bad[:2]] == [3, 3] and [s[2] for s in bad] == [0] * 5, bad
    none = _group(_pyenv(CCLX_NCCL_PATH=fakes["path"]))  # no group functions at all
    assert [s[1] for s in none] == [5] * 5 and [s[2] for s in none] == [0] * 5, none


_SIMULATE_PY = """
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LOCAL)
buf = ctypes.create_string_buffer(64)
out = {}
def allreduce():  # a float32 sum on a comm the drop-in does not know: forwarded either way
    return lib.ncclAllReduce(buf, buf, 4, 7, 0, ctypes.c_void_p(0x10), None)
out["start"] = lib.ncclGroupStart()
out["depth_in_group"] = lib.cclxDropinGroupDepth()
if sys.argv[2] == "simulate":
    out["simulate"] = lib.ncclGroupSimulateEnd(None)
out["depth_after"] = lib.cclxDropinGroupDepth()
sys.stderr.write("--- allreduce\\n")
sys.stderr.flush()
out["allreduce"] = allreduce()
print(json.dumps(out))
"""


def _simulate(fakes, mode):
    env = _pyenv(CCLX_NCCL_PATH=fakes["group_ok"], CCLX_DEBUG="TRACE")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_SIMULATE_PY), LIB, mode], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    trace = r.stderr.split("--- allreduce", 1)[1]
    return json.loads(r.stdout.strip().splitlines()[-1]), trace


def test_group_simulate_end_closes_the_depth(fakes):
    """torch's cost estimator ends a group with ncclGroupSimulateEnd: the depth returns to 0 and
    the next collective is considered for interception (not forwarded as "inside a group")."""
    got, trace = _simulate(fakes, "simulate")
    assert got == {"start": 0, "depth_in_group": 1, "simulate": 0, "depth_after": 0,
                   "allreduce": 0}, got
    assert "forwarded: a comm the drop-in does not know" in trace, trace
    assert "inside ncclGroupStart/End" not in trace, trace
    # Without it, the same call is still inside the group (what the trace line tells apart).
    got, trace = _simulate(fakes, "none")
    assert got["depth_after"] == 1 and got["allreduce"] == 0, got
    assert "forwarded: inside ncclGroupStart/End" in trace, trace


# ---- (e) the cclx-nccl launcher ----

def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "cclx.dropin", *args],
                          env=env or _pyenv(), capture_output=True, text=True, timeout=120)


def test_cli_path():
    r = _cli("--path")
    assert r.returncode == 0, r.stderr
    assert os.path.isfile(r.stdout.strip()) and r.stdout.strip() == LIB


def test_cli_run_sets_environment():
    other = next(iter(glob.glob("/lib/x86_64-linux-gnu/libm.so.6") +
                      glob.glob("/usr/lib64/libm.so.6") + glob.glob("/lib64/libm.so.6")), None)
    env = _pyenv(CCLX_NCCL_INTERCEPT="0", **({"LD_PRELOAD": other} if other else {}))
    code = ("import json, os; print(json.dumps({k: os.environ.get(k) for k in ('LD_PRELOAD', "
            "'VLLM_NCCL_SO_PATH', 'SGLANG_NCCL_SO_PATH', 'CCLX_NCCL_PIP_DIR')}))")
    r = _cli("run", "--", sys.executable, "-c", code, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    pre = got["LD_PRELOAD"].split(":")
    assert pre[0] == LIB, got
    assert pre[1:] == ([other] if other else []), got
    assert got["VLLM_NCCL_SO_PATH"] == LIB and got["SGLANG_NCCL_SO_PATH"] == LIB, got
    pip = dropin.pip_nccl_dir()
    if pip:
        assert got["CCLX_NCCL_PIP_DIR"] == pip, got
    # Without "--" too.
    r = _cli("run", sys.executable, "-c", "import os; print(os.environ['LD_PRELOAD'])", env=env)
    assert r.returncode == 0 and r.stdout.strip().split(":")[0] == LIB, r.stdout + r.stderr


def test_cli_help():
    for args in (["--help"], ["run", "--help"]):
        r = _cli(*args)
        assert r.returncode == 0, r.stderr
        assert "LD_LIBRARY_PATH" in r.stdout and "DT_RPATH" in r.stdout, r.stdout


def test_cli_without_command():
    for args in (["run"], ["run", "--"], []):
        r = _cli(*args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
