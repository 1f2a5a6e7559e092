"""cclx-perf options and baselines on the CPU: --baseline parsing, skip reasons, the table / JSON
/ summary columns of baselines (fake ones in-process: a plain column, a variant baseline, a
column without numbers for some sizes, a wrong variant), multicast settings forced off, help
for every flag, empty size ranges and missing optional packages explained before any sweep."""
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import types

import numpy as np
import pytest

import harness
from cclx.perf import baselines as BL
from cclx.perf import bench as B
from cclx.perf import measure as M
from cclx.perf import report as R
from cclx.perf import cli as P


def _run(argv, tmp_path, extra_env=None, pythonpath_first=None):
    env = harness.child_env(extra_env)
    if pythonpath_first:
        env["PYTHONPATH"] = pythonpath_first + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "cclx.perf", *argv], env=env,
                          capture_output=True, text=True, timeout=120, cwd=str(tmp_path))


# ----------------------------------------------------------------------------- options
def test_baseline_parsing():
    assert BL.parse("auto") == (["nccl", "nccl-sym", "torch-symm"], False)
    assert BL.parse("all") == (["nccl", "nccl-sym", "torch-symm"], True)
    assert BL.parse("none") == ([], True)
    assert BL.parse("torch-symm, nccl") == (["nccl", "torch-symm"], True)  # table order
    assert BL.parse("NCCL-SYM") == (["nccl-sym"], True)
    with pytest.raises(ValueError, match="unknown baseline 'vllm'"):
        BL.parse("nccl,vllm")


def test_every_flag_has_help():
    p = P.build_parser()
    for a in p._actions:
        if isinstance(a, argparse._HelpAction) or a.help == argparse.SUPPRESS:
            continue
        assert a.help and len(a.help) > 8, a.option_strings
    text = p.format_help()
    for flag in ("-b", "-e", "-f", "-n", "-w", "--baseline", "nccl-sym", "torch-symm"):
        assert flag in text


def _fake_torch(gpus):
    cuda = types.SimpleNamespace(is_available=lambda: gpus > 0, device_count=lambda: gpus)
    return types.SimpleNamespace(cuda=cuda)


def _resolve(*argv, gpus=0):
    a = P.build_parser().parse_args(list(argv))
    P._resolve(a, _fake_torch(gpus))
    return a


def test_resolve_baselines():
    a = _resolve(gpus=2)
    assert a.baselines == ["nccl", "nccl-sym", "torch-symm"] and not a.baselines_explicit
    a = _resolve("--no-nccl", gpus=2)
    assert a.baselines == [] and a.baselines_explicit
    a = _resolve("--baseline", "nccl-sym", gpus=2)
    assert a.baselines == ["nccl-sym"]
    a = _resolve("--api", "nccl", gpus=2)
    assert a.baselines == ["nccl"]
    with pytest.raises(SystemExit, match="--baseline does not apply"):
        _resolve("--api", "nccl", "--baseline", "nccl-sym", gpus=2)
    with pytest.raises(SystemExit, match="contradict"):
        _resolve("--no-nccl", "--baseline", "nccl", gpus=2)
    with pytest.raises(SystemExit, match="unknown baseline 'mpi'"):
        _resolve("--baseline", "mpi")


def test_multicast_forced_off(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    monkeypatch.delenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", raising=False)
    notes = BL.force_no_multicast()
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert notes == ["NCCL_NVLS_ENABLE=1 overridden with 0 (NVLink multicast is never used)"]
    assert BL.force_no_multicast() == []


def test_cli_sets_no_multicast_for_every_rank(tmp_path):
    j = tmp_path / "r.json"
    r = _run(["--device", "cpu", "-N", "2", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
              "-R", "1", "--json", str(j)], tmp_path,
             {"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stderr.count("overridden") == 2  # the two settings, once (not once per rank)
    env = json.loads(j.read_text())["machine"]["env"]  # as rank 0 saw it
    assert env["NCCL_NVLS_ENABLE"] == "0" and env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"


@pytest.mark.parametrize("argv,msg", [
    (["-b", "2K", "-e", "1K"], "no sizes to run: -b 2048 is larger than -e 1024"),
    (["-b", "1", "-e", "3"], "every size from -b 1 to -e 3 bytes is below 4 bytes, one f32 "
                             "element"),
    (["-C", "all_gather", "-b", "4", "-e", "7", "-N", "2"],
     "is below 8 bytes, one f32 element per rank for all_gather at 2 ranks"),
    (["-f", "1"], "-f must be > 1"),
    (["-n", "0"], "--iters must be >= 1"),
])
def test_empty_or_bad_ranges_say_why(tmp_path, argv, msg):
    r = _run(["--device", "cpu", *argv], tmp_path)
    assert r.returncode != 0
    assert msg in r.stderr, r.stderr
    assert "size(B)" not in r.stdout and "Traceback" not in r.stderr


def _blocked(tmp_path, *mods):
    d = tmp_path / "blocked"
    for m in mods:
        (d / m).mkdir(parents=True)
        (d / m / "__init__.py").write_text(f"raise ImportError('{m} blocked by the test')\n")
    return str(d)


def test_missing_ml_dtypes_one_line(tmp_path):
    r = _run(["--device", "cpu", "-d", "bf16", "-N", "4"], tmp_path,
             pythonpath_first=_blocked(tmp_path, "ml_dtypes"))
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["cclx-perf: -d bf16 on CPU needs ml_dtypes: pip install ml-dtypes"], lines
    assert r.stdout == ""  # before any rank started


def test_missing_matplotlib_before_sweep(tmp_path):
    r = _run(["--device", "cpu", "--plot", str(tmp_path / "p.png"), "-N", "2"], tmp_path,
             pythonpath_first=_blocked(tmp_path, "matplotlib"))
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines == ["cclx-perf: --plot needs matplotlib: pip install matplotlib"], lines
    assert r.stdout == ""


def test_cpu_baselines_all_say_why(tmp_path):
    j = tmp_path / "r.json"
    r = _run(["--device", "cpu", "-N", "2", "-b", "1K", "-e", "4K", "-f", "4", "-n", "1",
              "-w", "0", "-R", "1", "--baseline", "all", "--json", str(j)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    for b in ("nccl", "nccl-sym", "torch-symm"):
        assert f"# baseline {b}: skipped: needs CUDA (this run is on CPU)" in r.stdout
    data = json.loads(j.read_text())
    assert data["machine"]["baselines"]["nccl-sym"] == {
        "skipped": "needs CUDA (this run is on CPU)", "measured": False}
    assert all("nccl" not in row and "speedup_vs" not in row for row in data["results"])
    # default (auto) on CPU: one line, no per-baseline noise
    r = _run(["--device", "cpu", "-N", "2", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0",
              "-R", "1"], tmp_path)
    assert r.returncode == 0 and "# baselines: none on CPU" in r.stdout
    assert "# baseline nccl" not in r.stdout


# ----------------------------------------------------------------------------- set-up reasons
class DictStore:
    def __init__(self):
        self.kv = {}

    def set(self, k, v):
        self.kv[k] = v.encode() if isinstance(v, str) else bytes(v)

    def get(self, k, timeout=1.0):
        return self.kv[k]

    def wait(self, keys, timeout=1.0):
        missing = [k for k in keys if k not in self.kv]
        assert not missing, missing


def test_agree_names_the_failing_rank():
    st = DictStore()
    st.set("k/1", json.dumps("ncclMemAlloc failed"))
    st.set("k/2", json.dumps(None))
    assert BL.agree(st, "k", 0, 3, None, 1.0) == "rank 1: ncclMemAlloc failed"
    st = DictStore()
    assert BL.agree(st, "k", 0, 1, None, 1.0) is None
    assert BL.agree(st, "j", 0, 1, "own", 1.0) == "own"


def test_nccl_sym_reasons():
    lib = types.SimpleNamespace(ncclMemAlloc=1, ncclMemFree=1)  # an NCCL before 2.27
    why = BL.nccl_sym_missing(lib, "/x/libnccl.so.2", 22603)
    assert why == ("NCCL 2.26.3 (/x/libnccl.so.2) has no ncclCommWindowRegister, "
                   "ncclCommWindowDeregister (symmetric windows need NCCL 2.27 or newer)")
    full = types.SimpleNamespace(**{f: 1 for f in BL.SYMM_FUNCS})
    assert BL.nccl_sym_missing(full, "/x", 22809) is None
    assert BL.version_str(22809) == "2.28.9"
    import cclx

    if not cclx._C.has_cuda:  # a CPU build loads no NCCL: the baseline says so
        sym, f = BL.open_nccl_sym(None, 0, 1, DictStore(), 1.0, 4096)
        assert sym is None and "cclx loaded no NCCL library" in f["skipped"]


def test_torch_symm_reasons(monkeypatch):
    assert BL.torch_symm_size_skip("all_gather", "bf16", "sum", 1024).endswith("allreduce only")
    assert "sum only" in BL.torch_symm_size_skip("all_reduce", "bf16", "max", 1024)
    assert "bf16 and f32 only" in BL.torch_symm_size_skip("all_reduce", "f16", "sum", 1024)
    assert "multiple of 4 bytes" in BL.torch_symm_size_skip("all_reduce", "bf16", "sum", 6)
    assert BL.torch_symm_size_skip("all_reduce", "f32", "sum", 1024) is None
    ts, f = BL.open_torch_symm(None, 0, 1, DictStore(), 1.0, None, 16, "no allreduce in -C")
    assert ts is None and f["skipped"] == "no allreduce in -C"
    monkeypatch.setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0")
    ts, f = BL.open_torch_symm(None, 0, 1, DictStore(), 1.0, None, 16, None)
    assert ts is None and "TORCH_SYMM_MEM_DISABLE_MULTICAST is not 1" in f["skipped"]


# ----------------------------------------------------------------------------- columns
class FakeComm:
    """A one-rank allreduce: the output is the input (or `bad` where it should not be)."""

    def __init__(self, bad=False):
        self.bad = bad

    def all_reduce(self, s, redop, async_op=False, hints=None, output=None):
        output[...] = 0 if self.bad else s


def _args(**kw):
    d = dict(check=1, warmup=1, repeats=2, iters=2, dtype="f32", op="sum", root=0)
    d.update(kw)
    return types.SimpleNamespace(**d)


def _columns(xp, bad_variant=False):
    def make_case(coll, count, like=None, send_buf=None, recv_buf=None):
        return B.Case(xp, coll, count, 0, 1, "sum", 0, like, send_buf, recv_buf)

    arena = np.empty(1 << 12, dtype=np.float32)  # a "symmetric buffer": inputs live here
    cols = [M.comm_column("cclx", FakeComm(), None, {}, make_case),
            M.comm_column("nccl", FakeComm(), None, {}, make_case)]
    small = M.comm_column("nccl-sym", FakeComm(), None, {}, make_case,
                          send_buf=lambda k: arena[:k], recv_buf=lambda k, s: np.empty(k, s.dtype))
    small.skip = lambda coll, nb: "larger than the window" if nb > 1024 else None
    cols.append(small)

    def variant(v):
        inplace = v == "twoshot"

        def case(coll, count, like):
            return make_case(coll, count, like, lambda k: arena[:k],
                             (lambda k, s: s) if inplace else None)

        def call(c):
            def run():
                if v == "oneshot":
                    c.recv[...] = c.send
                elif bad_variant:  # in place, but wrong
                    c.send[...] = 0
            return run
        return M.Column(f"torch-symm/{v}", "torch-symm", None, case, call, variant=v)

    cols += [variant("oneshot"), variant("twoshot")]
    return cols, make_case


def _sweep(bad_variant=False):
    xp = B.Xp(None, None, "f32")
    cols, make_case = _columns(xp, bad_variant)
    ex = M.Exchange(DictStore(), 0, 1, 1.0)
    timer = B.Timer(None, False, 0, False)
    rows = [M.one_size(_args(), "all_reduce", k, k * 4, 1, cols, lambda: None, timer, 0.0,
                       ex, make_case, shared=False, corrupt=False) for k in (64, 256, 1024)]
    return rows, M.table_names(cols)


def test_columns_ratios_and_variants():
    rows, names = _sweep()
    assert names == ["cclx", "nccl", "nccl-sym", "torch-symm"]
    for r in rows:
        t = {n: r[n]["time_us"] for n in names if n in r}
        assert r["cclx"]["wrong"] == 0 and r["nccl"]["wrong"] == 0
        ts = r["torch-symm"]
        assert set(ts["variants"]) == {"oneshot", "twoshot"} and ts["wrong"] == 0
        assert ts["time_us"] == min(v["time_us"] for v in ts["variants"].values())
        assert ts["variant"] == min(ts["variants"], key=lambda v: ts["variants"][v]["time_us"])
        bases = [n for n in names[1:] if n in r]
        for b in bases:
            assert r["speedup_vs"][b] == pytest.approx(t[b] / t["cclx"])
        best = min(bases, key=lambda b: t[b])
        assert r["best_baseline"] == best and r["speedup_best"] == r["speedup_vs"][best]
        assert r["speedup"] == r["speedup_vs"]["nccl"]
    assert "nccl-sym" in rows[0] and "nccl-sym" in rows[1] and "nccl-sym" not in rows[2]
    assert rows[2]["not_measured"] == {"nccl-sym": "larger than the window"}

    summ = R.summary(rows, names, 1, "cpu")
    assert summ["passed"] and summ["wrong"] == 0
    assert set(summ["speedup_vs"]) == {"nccl", "nccl-sym", "torch-symm"}
    assert summ["speedup_vs"]["nccl-sym"]["sizes"] == 2
    assert summ["speedup_of"] == "nccl"
    assert summ["speedup_geomean"] == summ["speedup_vs"]["nccl"]["geomean"]
    assert summ["speedup_best"]["sizes"] == 3
    line = R.summary_line(summ, names)
    assert "speedup(nccl/cclx) geomean=" in line and "speedup(torch-symm/cclx)" in line
    assert "speedup(best baseline/cclx)" in line and line.endswith("PASSED")

    args = types.SimpleNamespace(colls=["all_reduce"], dtype="f32", op="sum", root=0, iters=2,
                                 warmup=1, repeats=2, graph=0, blocking=0, algo="auto",
                                 low_precision=False, fp8_algo="auto", api="cclx", check=1,
                                 cuda=False, baselines_explicit=True)
    facts = {"baselines": {"nccl": {"version": "2.28.9", "library": "/l", "measured": True},
                           "nccl-sym": {"window_bytes": 4096, "measured": True},
                           "torch-symm": {"torch": "2.11", "variants": ["oneshot", "twoshot"],
                                          "measured": True}}}
    head = R.header(args, 1, names, facts)
    cols_line = head.splitlines()[-1]
    for n in names[1:]:
        assert f"{n} time(us)" in cols_line and f"vs {n}" in cols_line
    assert "vs best" in cols_line
    assert "# baseline nccl-sym: the same NCCL, buffers from ncclMemAlloc" in head
    assert "the fastest of oneshot, twoshot per size" in head
    width = len(cols_line)
    for r in rows:
        line = R.row_line(r, names)
        assert len(line) == width, (line, cols_line)
    last = R.row_line(rows[2], names).split("|")
    assert last[3].split() == ["-", "-", "-"]  # nccl-sym: no number at 4 KiB
    vs = last[-1].split()
    assert vs[1] == "-" and len(vs) == 4


def test_wrong_variant_fails_the_baseline_column():
    rows, names = _sweep(bad_variant=True)
    for r in rows:
        assert r["torch-symm"]["variants"]["twoshot"]["wrong"] > 0
        assert r["torch-symm"]["wrong"] == r["torch-symm"]["variants"]["twoshot"]["wrong"]
    summ = R.summary(rows, names, 1, "cpu")
    assert not summ["passed"] and summ["wrong"] > 0


def test_json_and_plot_with_baselines(tmp_path):
    pytest.importorskip("matplotlib")
    rows, names = _sweep()
    summ = R.summary(rows, names, 1, "cpu")
    args = argparse.Namespace(colls=["all_reduce"], baselines=names[1:])
    R.write_json(str(tmp_path / "r.json"), args, {"baselines": {}}, rows, summ)
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["results"][2]["not_measured"]["nccl-sym"] == "larger than the window"
    assert d["summary"]["speedup_vs"]["torch-symm"]["sizes"] == 3
    R.plot(str(tmp_path / "p.png"), rows, names, "t")
    assert (tmp_path / "p.png").stat().st_size > 1000


# ----------------------------------------------------------------------------- teardown
class SlowGets:
    """A store whose reads start late (a rank descheduled, or in its client's back-off)."""

    def __init__(self, store, delay):
        self.store, self.delay = store, delay

    def set(self, k, v):
        self.store.set(k, v)

    def get(self, k, timeout):
        time.sleep(self.delay)
        return self.store.get(k, timeout)

    def wait(self, keys, timeout):
        self.store.wait(keys, timeout)


def _ranks(n, slow_rank, delay):
    import cclx

    server = cclx.TcpStore("127.0.0.1", 0, True, "perf-exchange-test", 30.0)
    stores = [server] + [cclx.TcpStore("127.0.0.1", server.port, False, "perf-exchange-test",
                                       30.0) for _ in range(n - 1)]
    stores[slow_rank] = SlowGets(stores[slow_rank], delay)
    exs = [M.Exchange(s, r, n, 30.0) for r, s in enumerate(stores)]
    del server, stores
    return exs


def _threads(exs, body):
    errors, events = {}, []

    def run(r):
        try:
            body(r, exs[r], events)
        except Exception as e:  # noqa: BLE001
            errors[r] = e
    ts = [threading.Thread(target=run, args=(r,)) for r in range(len(exs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return errors, events


def test_store_owner_leaves_only_after_every_rank():
    exs = _ranks(4, 3, 0.4)

    def body(r, ex, events):
        v = ex.reduce([float(r)], "sum")
        events.append(("read", r, time.monotonic()))
        assert v == [6.0]
        ex.finish()  # rank 0: stops its server here
        events.append(("left", r, time.monotonic()))

    errors, events = _threads(exs, body)
    assert not errors, errors
    left0 = [t for k, r, t in events if k == "left" and r == 0][0]
    assert all(t <= left0 for k, r, t in events if k == "read")
    assert all(ex.store is None for ex in exs)


def test_store_owner_leaving_early_breaks_a_slow_rank():
    """The failure finish() prevents: rank 0 drops the store while rank 3 still reads."""
    exs = _ranks(4, 3, 0.4)

    def body(r, ex, events):
        ex.reduce([float(r)], "sum")
        if r == 0:
            ex.store = None  # leaves without the last exchange

    errors, _ = _threads(exs, body)
    assert 3 in errors and 0 not in errors, errors  # (ranks 1 and 2 may be in a back-off too)
    for e in errors.values():
        assert "closed the connection" in str(e) or "reset" in str(e), e


def test_perf_exits_zero_50_runs_back_to_back(tmp_path):
    """4 CPU ranks, 50 runs: every one prints PASSED and exits 0 (rank 0 serves the store and
    must not leave while another rank still reads from it)."""
    t0 = time.time()
    argv = ["--device", "cpu", "-N", "4", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-R", "1"]
    for i in range(50):
        r = _run(argv, tmp_path)
        assert r.returncode == 0 and "PASSED" in r.stdout, (
            f"run {i + 1} of 50: rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    print(f"50 runs in {time.time() - t0:.1f} s")
