"""cclx-perf on CPU processes: table, summary, JSON, plot, exit status on wrong results."""
import json
import os
import subprocess
import sys

import pytest

import harness

ARGS = ["--device", "cpu", "-N", "2", "-b", "8", "-e", "4K", "-f", "8", "-C", "all",
        "-n", "3", "-w", "1", "-R", "2"]


def _run(extra, tmp_path):
    return subprocess.run([sys.executable, "-m", "cclx.perf", *ARGS, *extra],
                          env=harness.child_env(), capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))


def test_perf_cpu_all_collectives(tmp_path):
    j = tmp_path / "r.json"
    r = _run(["--json", str(j)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == (
        "cclx-perf: all_reduce,all_gather,reduce_scatter,all_to_all,all_to_all_v,broadcast,reduce "
        "8 B..4 KiB, f32, 2 CPU processes over host shared memory (--device cpu)"), r.stdout
    assert "size(B)" in r.stdout and "busbw" in r.stdout
    assert "cclx-perf summary" in r.stdout and "PASSED" in r.stdout
    data = json.loads(j.read_text())
    colls = {row["coll"] for row in data["results"]}
    assert colls == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_to_all_v",
                     "broadcast", "reduce"}
    for row in data["results"]:
        assert row["cclx"]["wrong"] == 0 and row["cclx"]["time_us"] > 0
        assert "nccl" not in row
    ar = [r for r in data["results"] if r["coll"] == "all_reduce"]
    assert [r["bytes"] for r in ar] == [8, 64, 512, 4096]
    # busbw = algbw * 2(n-1)/n for allreduce; (n-1)/n for allgather with n = 2
    assert abs(ar[-1]["cclx"]["busbw"] - ar[-1]["cclx"]["algbw"]) < 1e-9
    ag = [r for r in data["results"] if r["coll"] == "all_gather"][-1]
    assert abs(ag["cclx"]["busbw"] - ag["cclx"]["algbw"] / 2) < 1e-9
    assert data["machine"]["cclx_version"] and data["summary"]["passed"]


def test_plan_line_says_what_and_where():
    import types

    from cclx.perf import report as R

    a = types.SimpleNamespace(colls=["all_reduce"], minbytes=1024, maxbytes=64 << 20,
                              dtype="f32", cuda=False)
    assert R.plan_line(a, 4, object(), "auto") == (
        "cclx-perf: all_reduce 1 KiB..64 MiB, f32, 4 CPU processes over host shared memory "
        "(no GPU found)")
    assert R.plan_line(a, 4, None, "auto").endswith("(no GPU used: torch is not installed)")
    a.minbytes, a.maxbytes = 1000, 3 << 30
    assert "1000 B..3 GiB" in R.plan_line(a, 2, None, "cpu")


def test_perf_cpu_plot(tmp_path):
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    p = tmp_path / "r.png"
    r = _run(["-C", "all_reduce", "--plot", str(p)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED" in r.stdout and p.exists() and p.stat().st_size > 1000


def test_perf_alltoallv_rows(tmp_path):
    """-C alltoallv: unequal splits (the same total bytes as all_to_all), checked exactly."""
    j = tmp_path / "v.json"
    r = _run(["-C", "alltoallv", "-N", "3", "--json", str(j)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(j.read_text())["results"]
    assert rows and {row["coll"] for row in rows} == {"all_to_all_v"}
    for row in rows:
        assert row["cclx"]["wrong"] == 0 and row["bytes"] % 3 == 0


def test_perf_wrong_result_fails(tmp_path):
    r = _run(["-C", "all_reduce", "--corrupt-check"], tmp_path)
    assert r.returncode != 0
    assert "FAILED" in r.stdout


def test_perf_launcher_help():
    tool = os.path.join(harness.ROOT, "tools", "cclx-perf")
    r = subprocess.run([sys.executable, tool, "--help"], env=harness.child_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "-G" in r.stdout and "--low-precision" in r.stdout


def test_perf_bad_arguments(tmp_path):
    r = _run(["-C", "all_sum"], tmp_path)
    assert r.returncode != 0 and "unknown collective" in r.stderr
    r = _run(["--api", "nccl"], tmp_path)
    assert r.returncode != 0 and "--api nccl needs CUDA" in r.stderr
