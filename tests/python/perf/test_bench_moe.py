"""cclx-bench moe on CPU: the whole tool at tiny sizes on 2 and 3 CPU processes under torchrun
(table, JSON, plot, every output checked against float64), its argument errors, and the baseline
(hand-written all_to_all_single with host counts) on its own."""
import json
import subprocess
import sys
import types

import pytest

import harness

TINY = ["--hidden", "200", "--experts", "12", "--topk", "4", "--tokens", "1,7",
        "--iters", "2", "--warmup", "1"]


def _torch():
    return pytest.importorskip("torch", reason="cclx-bench moe needs torch")


def _run(tmp_path, n, *extra):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
           "--master-port", str(harness.free_port()), "-m", "cclx.bench", "moe", *TINY, *extra]
    return subprocess.run(cmd, env=harness.child_env(), capture_output=True, text=True,
                          timeout=300, cwd=str(tmp_path))


@pytest.mark.parametrize("n", [2, 3])
def test_tool_cpu_ranks(tmp_path, n):
    _torch()
    j, p = tmp_path / "moe.json", tmp_path / "moe.png"
    r = _run(tmp_path, n, "--json", str(j), "--plot", str(p))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert f"cpu, {n} processes; world {n}; hidden 200, top-4, 12 experts" in r.stdout
    assert "host cost and correctness only" in r.stdout
    assert "nccl-ep: not measured" in r.stdout
    assert "torch baseline transport: torch.distributed gloo" in r.stdout
    assert "all outputs within tolerance" in r.stdout
    assert r.stdout.count("cclx-bench moe: all outputs") == 1  # rank 0 only
    data = json.loads(j.read_text())
    assert data["passed"] and data["meta"]["world_size"] == n
    assert data["meta"]["device_kind"] == "cpu" and data["meta"]["commit"]
    rows = data["rows"]
    impls = ("buffer-bf16", "buffer-fp8", "cclx-bf16", "cclx-fp8", "torch")
    assert [(x["tokens"], x["impl"]) for x in rows] == [(t, i) for t in (1, 7) for i in impls]
    for x in rows:
        fp8 = x["impl"].endswith("fp8")
        assert x["ok"] and x["dispatch_us"] > 0 and x["combine_us"] > 0
        assert 0 < x["dispatch_host_us"] <= x["dispatch_us"] * 1.01
        assert 1 <= x["pairs"] <= x["tokens"] * min(n, 4)
        assert x["wire_bytes_per_row"] == (200 + 4 * 2 if fp8 else 400)
        assert x["max_rel_err"] < (0.125 if fp8 else 2 ** -6)
        if x["impl"].startswith("buffer"):
            assert x["route"] == "host" and x["kernels_dispatch"] is None
            assert x["rank_major_bound_bytes"] <= x["comm_bytes"] <= \
                2 * x["rank_major_bound_bytes"] + (1 << 20)
    assert "rank-major bound" in r.stdout
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert p.exists() and p.stat().st_size > 1000


def test_tool_argument_errors(tmp_path):
    _torch()
    r = _run(tmp_path, 2, "--impl", "cclx-bf16,fast")
    assert r.returncode != 0 and "unknown --impl" in r.stdout + r.stderr
    one = [sys.executable, "-m", "cclx.bench", "moe", "--tokens", "1", "--hidden", "16",
           "--iters", "1", "--warmup", "0"]
    r = subprocess.run(one + ["--experts", "7", "--topk", "3"], env=harness.child_env(),
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr  # world size 1: any expert count divides
    assert "cpu, 1 process;" in r.stdout
    r = subprocess.run(one + ["--experts", "7"], env=harness.child_env(),
                       capture_output=True, text=True, timeout=120, cwd=str(tmp_path))
    assert r.returncode != 0 and "--topk 8 must be 1..--experts (7)" in r.stderr
    r = subprocess.run([sys.executable, "-m", "cclx.bench", "moe", "--help"],
                       env=harness.child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--max" not in r.stdout and "--tokens" in r.stdout


def test_buffer_rows_plumbing():
    """The Buffer rows' helpers without a GPU: the floors' byte counts, kernels per call on CPU,
    the NCCL EP status line and the shapes its row refuses."""
    torch = _torch()
    from cclx.bench import moe_buffer

    fb = moe_buffer.floor_bytes(128, 7168, 8, fp8=True)
    assert fb["dispatch"] == 128 * 7168 * 2 + 128 * 8 * 12 + 128 * (7168 + 4 * 56) + 128 * 8 * 8
    assert fb["combine"] == 128 * 8 * 7168 * 2 + 3 * 128 * 7168 * 2
    assert moe_buffer.kernel_profile(torch, lambda: None, cuda=False) == (None, None)
    from cclx.bench import moe_ncclep

    s = moe_ncclep.status()  # no nccl.ep here
    assert s.startswith("not measured: nccl.ep"), s
    # what the nccl-ep row refuses before any collective
    env = types.SimpleNamespace(cuda=False, shared=False, size=1)
    assert "GPU per rank" in moe_ncclep._shape_problem(env, 7168, 8, 256)
    env.cuda = True
    assert moe_ncclep._shape_problem(env, 7168, 8, 256) == ""
    assert "multiple of 512" in moe_ncclep._shape_problem(env, 7000, 8, 256)
    env.shared = True
    assert "share a GPU" in moe_ncclep._shape_problem(env, 7168, 8, 256)
