"""cclx-perf -C allreduce_rmsnorm on CPU processes: rows by tokens x hidden, checked against
float64, JSON fields, a wrong result fails the run, argument errors."""
import json
import subprocess
import sys

import pytest

import harness
from cclx.perf import fused as F

pytest.importorskip("torch")

ARGS = ["--device", "cpu", "-N", "3", "-C", "allreduce_rmsnorm", "--tokens", "1,3,8",
        "--hidden", "128,1000", "-n", "2", "-w", "1", "-R", "1"]


def _run(extra, tmp_path):
    return subprocess.run([sys.executable, "-m", "cclx.perf", *ARGS, *extra],
                          env=harness.child_env(), capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))


def test_rows_checked_and_json(tmp_path):
    j = tmp_path / "r.json"
    r = _run(["-d", "bf16", "--json", str(j), "--fused-algo", "twoshot"], tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "rmsnorm/1000" in r.stdout and "PASSED" in r.stdout
    assert "nccl = NCCL allreduce + torch.add + torch.nn.functional.rms_norm" in r.stdout
    rows = json.loads(j.read_text())["results"]
    assert [(x["tokens"], x["hidden"]) for x in rows] == [(t, h) for h in (128, 1000)
                                                          for t in (1, 3, 8)]
    for x in rows:
        assert x["coll"] == "allreduce_rmsnorm" and x["bytes"] == x["tokens"] * x["hidden"] * 2
        assert x["cclx"]["wrong"] == 0 and x["cclx"]["time_us"] > 0


def test_wrong_result_fails(tmp_path):
    r = _run(["-d", "f32", "--corrupt-check"], tmp_path)
    assert r.returncode != 0 and "FAILED" in r.stdout


def test_bad_arguments(tmp_path):
    r = _run(["-d", "i32"], tmp_path)
    assert r.returncode != 0 and "takes bf16, f16 or f32" in r.stderr
    r = _run(["--tokens", "8:2"], tmp_path)
    assert r.returncode != 0 and "empty token range" in r.stderr


def test_token_and_hidden_lists():
    assert F.parse_tokens("1:8192") == [2 ** k for k in range(14)]
    assert F.parse_tokens("3:20") == [4, 8, 16]
    assert F.parse_tokens("1,7,64") == [1, 7, 64]
    assert F.parse_hidden("4096,8192") == [4096, 8192]
    for bad in ("0", "", "1:0"):
        with pytest.raises(ValueError):
            F.parse_tokens(bad)
    assert F.plan([1, 2], [10], 2) == [(1, 10, 20), (2, 10, 40)]
