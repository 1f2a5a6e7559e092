"""cclx-perf -C put (window put + signal + wait_signal around the ring) on CPU processes."""
import json
import subprocess
import sys

import harness


def _run(args, tmp_path):
    return subprocess.run([sys.executable, "-m", "cclx.perf", "--device", "cpu", *args],
                          env=harness.child_env(), capture_output=True, text=True, timeout=180,
                          cwd=str(tmp_path))


def test_perf_put_cpu(tmp_path):
    j = tmp_path / "put.json"
    r = _run(["-N", "3", "-C", "put,all_reduce", "-b", "4", "-e", "64K", "-f", "16", "-n", "5",
              "-w", "1", "-R", "2", "--json", str(j)], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASSED" in r.stdout
    rows = json.loads(j.read_text())["results"]
    put = [x for x in rows if x["coll"] == "put"]
    assert [x["bytes"] for x in put] == [4, 64, 1024, 16384]
    for x in put:
        assert x["cclx"]["wrong"] == 0 and x["cclx"]["time_us"] > 0
        assert abs(x["cclx"]["busbw"] - x["cclx"]["algbw"]) < 1e-9
    assert any(x["coll"] == "all_reduce" for x in rows)


def test_perf_put_wrong_result_fails(tmp_path):
    r = _run(["-N", "2", "-C", "put", "-b", "64", "-e", "64", "-n", "2", "-w", "1", "-R", "1",
              "--corrupt-check"], tmp_path)
    assert r.returncode != 0 and "FAILED" in r.stdout


def test_perf_put_not_with_api_nccl(tmp_path):
    r = _run(["-C", "put", "--api", "nccl"], tmp_path)
    assert r.returncode != 0 and "put" in r.stderr
