"""The NCCL drop-in's entry points for the shared-GPU mode, without a GPU (CUDA builds only: the
library must exist), over a fake libnccl.so.2: ncclGetUniqueId stamps the drop-in's rendezvous
into the bytes NCCL leaves zero (not with CCLX_DROPIN_SHARED=0, not when NCCL uses them), two
ranks that report GPUs of their own decide "not shared" and NCCL makes the comm, a handle the
drop-in does not know goes to NCCL unchanged, and CCLX_DROPIN_SHARED=1 with an id NCCL made
alone fails naming the call. (The shared comms themselves need a GPU: test_gpu_dropin_shared.py;
their dispatch's CPU twin: tests/cpp/dropin/test_dropin_shared*.cc.)"""
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

# A fake NCCL: an id with its first 40 bytes set (FULL: all 128), a comm pointer from init that
# remembers it ran, and ncclCommCount answering 1234.
_FAKE_C = r"""
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
static int inits = 0;
int ncclGetVersion(int* v) { *v = 22809; return 0; }
int ncclGetUniqueId(ncclUniqueId* id) {
  memset(id->internal, 0, 128);
  memset(id->internal, 0x11, FULL ? 128 : 40);
  return 0;
}
int ncclCommInitRank(void** comm, int nranks, ncclUniqueId id, int rank) {
  ++inits;
  *comm = (void*)(unsigned long)(0x1000 + rank);
  return 0;
}
int ncclCommCount(void* comm, int* count) { *count = 1234; return 0; }
int fakeInits(void) { return inits; }
"""

_RANK_PY = r"""
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
fake = ctypes.CDLL(sys.argv[2])
rank, n, idfile = int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
class Id(ctypes.Structure):  # passed by value, as ncclUniqueId is
    _fields_ = [("internal", ctypes.c_char * 128)]
uid = Id()
import os, time
if rank == 0:
    assert lib.ncclGetUniqueId(ctypes.byref(uid)) == 0
    open(idfile + ".tmp", "wb").write(bytes(uid))
    os.replace(idfile + ".tmp", idfile)
else:
    while not os.path.exists(idfile):
        time.sleep(0.01)
    ctypes.memmove(ctypes.byref(uid), open(idfile, "rb").read(), 128)
lib.ncclCommInitRank.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int, Id, ctypes.c_int]
lib.ncclCommCount.restype = ctypes.c_int
lib.ncclGetLastError.restype = ctypes.c_char_p
comm = ctypes.c_void_p()
rc = lib.ncclCommInitRank(ctypes.byref(comm), n, uid, rank)
cnt = ctypes.c_int(0)
lib.ncclCommCount.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
crc = lib.ncclCommCount(comm, ctypes.byref(cnt)) if rc == 0 else -1
err = lib.ncclGetLastError(None) or b""
print(f"rc={rc} comm={comm.value or 0:#x} count={cnt.value} crc={crc} inits={fake.fakeInits()} "
      f"stamp={bytes(uid)[88:96]!r} err={err.decode()}")
"""


@pytest.fixture(scope="module")
def fakes(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed")
    root = tmp_path_factory.mktemp("fake_nccl_shared")
    (root / "fake.c").write_text(_FAKE_C)
    out = {}
    for name, full in (("plain", 0), ("full", 1)):
        d = root / name
        d.mkdir()
        lib = d / "libnccl.so.2"
        subprocess.run(["gcc", "-shared", "-fPIC", f"-DFULL={full}", "-Wl,-soname,libnccl.so.2",
                        "-o", str(lib), str(root / "fake.c")], check=True, timeout=120)
        out[name] = str(lib)
    (root / "rank.py").write_text(textwrap.dedent(_RANK_PY))
    out["rank"] = str(root / "rank.py")
    out["root"] = root
    return out


def _env(fake, **extra):
    env = harness.child_env()
    for k in ("CCLX_NCCL_PATH", "CCLX_NCCL_PIP_DIR", "LD_PRELOAD", "CCLX_DROPIN_SHARED",
              "CCLX_DEBUG", "CUDA_VISIBLE_DEVICES"):
        env.pop(k, None)
    env.update({"CCLX_NCCL_PATH": fake, "CCLX_TIMEOUT": "30", "CUDA_VISIBLE_DEVICES": "",
                "CCLX_DEBUG": "INFO"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _ranks(fakes, n, fake="plain", tag="a", **extra):
    idfile = str(fakes["root"] / f"id_{tag}")
    procs = [subprocess.Popen([sys.executable, fakes["rank"], LIB, fakes[fake], str(r), str(n), idfile],
                              env=_env(fakes[fake], **extra), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(n)]
    outs = []
    for p in procs:
        o, e = p.communicate(timeout=120)
        assert p.returncode == 0, o + e
        line = [ln for ln in o.splitlines() if ln.startswith("rc=")][-1]
        fields = dict(f.split("=", 1) for f in line.split(" ")[:6])
        fields["err"] = line.split("err=", 1)[1]
        fields["log"] = e
        outs.append(fields)
    return outs


def test_no_shared_gpu_goes_to_nccl(fakes):
    """Stamped id; no two ranks on one GPU: every rank decides alike, NCCL makes the comm, and
    the handle (NCCL's) is forwarded."""
    for r in _ranks(fakes, 2, tag="own"):
        assert r["rc"] == "0" and r["inits"] == "1" and r["count"] == "1234", r
        assert r["stamp"] == repr(b"cclxSHR1"), r
        assert "no two ranks share a GPU" in r["log"], r["log"][-2000:]


def test_shared_off_leaves_the_id_and_exchanges_nothing(fakes):
    for r in _ranks(fakes, 2, tag="off", CCLX_DROPIN_SHARED="0"):
        assert r["rc"] == "0" and r["inits"] == "1", r
        assert r["stamp"] == repr(bytes(8)), r
        assert "share a GPU" not in r["log"], r["log"][-2000:]


def test_nccl_using_every_byte_is_not_stamped(fakes):
    for r in _ranks(fakes, 2, fake="full", tag="full"):
        assert r["rc"] == "0" and r["inits"] == "1", r
        assert r["stamp"] == repr(b"\x11" * 8), r


def test_forced_with_a_foreign_id_fails_naming_the_call(fakes):
    """CCLX_DROPIN_SHARED=1 and an id the drop-in did not stamp (the full fake's): an NCCL error
    naming ncclCommInitRank, NCCL not called."""
    for r in _ranks(fakes, 2, fake="full", tag="forced", CCLX_DROPIN_SHARED="1"):
        assert r["rc"] == "5" and r["inits"] == "0", r
        assert "ncclCommInitRank" in r["err"] and "CCLX_DROPIN_SHARED=1" in r["err"], r


def test_forced_without_a_gpu_fails_on_every_rank_naming_the_call(fakes):
    """CCLX_DROPIN_SHARED=1 with a stamped id: a cclx comm on a machine without a GPU cannot be
    made; every rank gets an NCCL error naming ncclCommInitRank (no hang), NCCL is not called."""
    for r in _ranks(fakes, 2, tag="nogpu", CCLX_DROPIN_SHARED="1"):
        assert r["rc"] != "0" and r["inits"] == "0", r
        assert "ncclCommInitRank" in r["err"], r
