"""cclx-bench tp at TP=1 on one GPU: every mode (decode under CUDA graphs and eager, prefill) on
a tiny shape, under torchrun and as a plain process; checks the JSON output."""
import json
import os
import subprocess
import sys

import pytest

try:
    import torch
except ImportError as e:
    pytest.skip(f"torch is not importable ({e})", allow_module_level=True)
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU, found none", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)
import harness  # noqa: E402

TINY = ["--hidden", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512", "--layers", "2",
        "--vocab", "1000", "--batch", "1,8", "--context", "128,256", "--tokens", "128,512",
        "--iters", "3", "--warmup", "2", "--repeats", "2"]


def _env():
    return harness.child_env({"NCCL_NVLS_ENABLE": "0", "CUDA_VISIBLE_DEVICES":
                              os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]})


def _check(data, comms, modes):
    assert data["summary"]["passed"], data["summary"]
    m = data["meta"]
    assert m["world_size"] == 1 and m["dtype"] == "bf16"
    assert m["model"] == "custom shape (from llama3-8b), 2 layers"
    rows = data["results"]
    assert {(r["mode"], r["exec"]) for r in rows} == modes
    for r in rows:
        res = r["results"]
        assert r["allreduce"]["calls"] == 4
        assert r["allreduce"]["bytes_per_call"] == r["step_tokens"] * 256 * 2
        for n in comms:
            d = res[n]
            assert d["ms"] > 0 and d["tok_s"] > 0
            assert d["check"] in ("ref", "ok"), (r["mode"], r["exec"], n, d)
            # one rank: every allreduce is the identity, so every communicator gives the
            # reference's logits (up to kernel-level nondeterminism)
            assert d["logits_rel_err"] <= 1e-3 and d["hidden_rel_err"] <= 1e-3, d
        assert res["skip"]["ms"] > 0
        if "cclx-fp8" in res:
            assert res["cclx-fp8"]["check"] == "fp8"
            assert res["cclx-fp8"]["hidden_rel_err"] < 0.5


def test_tp_all_modes_torchrun(tmp_path):
    j, p = tmp_path / "tp.json", tmp_path / "tp.png"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1",
           "--master-port", str(harness.free_port()), "-m", "cclx.bench", "tp", *TINY,
           "--fp8-min-bytes", "128K", "--json", str(j), "--plot", str(p)]
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    assert "dropin: not measured" in r.stdout and "PASSED" in r.stdout
    data = json.loads(j.read_text())
    modes = {("decode", "graph"), ("decode", "eager"), ("prefill", "eager")}
    _check(data, ["nccl", "cclx"], modes)
    # cclx-fused (allreduce + residual add + RMSNorm as one call) is a default column: measured
    # in every row and checked against the reference like cclx
    assert "cclx-fused" in data["meta"]["comms"]
    assert "# cclx-fused: each allreduce" in r.stdout
    _check(data, ["cclx-fused"], modes)
    # nccl-sym (windows registered on the NCCL cclx loaded, the model writing into them):
    # measured and checked like cclx, or not measured with the reason in the header
    sym = data["meta"]["nccl_sym"]
    if "nccl-sym" in data["meta"]["comms"]:
        _check(data, ["nccl-sym"], modes)
        assert sym["window_bytes"] >= 512 * 256 * 2 and "nccl-sym: NCCL" in r.stdout
    else:
        assert f"nccl-sym: not measured ({sym['skipped']})" in r.stdout
    # FP8 from 128 KiB: the 512-token prefill (256 KiB per allreduce), not the 128-token one
    # (64 KiB) nor the decode rows
    fp8 = {(r["mode"], r.get("tokens")) for r in data["results"] if "cclx-fp8" in r["results"]}
    assert fp8 == {("prefill", 512)}
    assert len(data["results"]) == 2 * 2 * 2 + 2
    assert p.exists() and p.stat().st_size > 1000


def test_tp_decode_graph_fp8_plain_process(tmp_path):
    """No torchrun: one rank by itself; FP8 hints inside a captured decode step."""
    j = tmp_path / "tp.json"
    cmd = [sys.executable, "-m", "cclx.bench", "tp", *TINY, "--mode", "decode", "--graph",
           "--batch", "8", "--context", "128", "--fp8-min-bytes", "4K", "--json", str(j)]
    env = _env()
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
    data = json.loads(j.read_text())
    _check(data, ["nccl", "cclx"], {("decode", "graph")})
    assert "cclx-fp8" in data["results"][0]["results"]  # 8 x 256 x 2 B = 4 KiB per allreduce
