"""cclx-bench tp on CPU: argument parsing, the presets' shape arithmetic, the tensor-parallel
forward at 2 ranks against 1 rank (host transport, CPU torch tensors), and a whole run of the
tool on 2 CPU processes under torchrun."""
import dataclasses
import json
import os
import subprocess
import sys

import pytest

import harness
from cclx.bench import model as M
from cclx.bench import tp as T

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torch is not importable ({e}); the model tests need it")
    return torch


def _args(*argv, cuda=False):
    a = T.build_parser().parse_args(list(argv))
    T.resolve(a, cuda)
    return a


# ----------------------------------------------------------------------------- arguments
def test_defaults_cpu():
    a = _args()
    assert a.device == "cpu" and not a.cuda and a.execs == ["eager"]
    assert a.batch == [1, 8, 32, 64] and a.context == [1024, 4096]
    assert a.tokens == [1024, 4096, 8192]
    assert a.comm_list == ["nccl", "cclx", "dropin", "cclx-fp8", "nccl-sym", "cclx-fused"]
    assert a.fp8_min_bytes == 16 << 20 and a.tol == 1e-4
    assert a.shape == M.PRESETS["llama3-8b"]
    rows = T.plan_rows(a, False)
    assert len(rows) == 2 * 4 + 3
    assert [r.step_tokens for r in rows[-3:]] == [1024, 4096, 8192]


def test_defaults_cuda_and_exec_flags():
    a = _args(cuda=True)
    assert a.execs == ["graph", "eager"] and a.tol == 5e-2
    rows = T.plan_rows(a, True)
    assert len(rows) == 2 * 4 * 2 + 3
    # graph and eager of one batch and context are neighbours (they share a KV cache)
    assert [(r.exec, r.batch, r.positions) for r in rows[:2]] == [("graph", 1, 1024),
                                                                   ("eager", 1, 1024)]
    assert _args("--graph", cuda=True).execs == ["graph"]
    assert _args("--eager", cuda=True).execs == ["eager"]
    assert _args("--graph", "--eager", cuda=True).execs == ["graph", "eager"]
    a = _args("--mode", "decode", "--batch", "2,4", "--context", "1K", "--graph", cuda=True)
    assert [(r.mode, r.batch, r.positions) for r in T.plan_rows(a, True)] == [
        ("decode", 2, 1024), ("decode", 4, 1024)]
    a = _args("--mode", "prefill", "--tokens", "512,2K", cuda=True)
    assert [(r.mode, r.exec, r.positions) for r in T.plan_rows(a, True)] == [
        ("prefill", "eager", 512), ("prefill", "eager", 2048)]


def test_shape_flags_and_description():
    a = _args("--preset", "llama3-70b", "--layers", "8")
    assert a.shape == dataclasses.replace(M.PRESETS["llama3-70b"], layers=8)
    info = {"requested": 8, "layers": 8, "reduced_for_memory": False, "shape_is_preset": True}
    assert T.describe_model(a, a.shape, info) == "llama3-70b shape, 8 of 80 layers (--layers 8)"
    a = _args("--preset", "llama3-70b")
    info = {"requested": 80, "layers": 20, "reduced_for_memory": True, "shape_is_preset": True,
            "free_bytes": 100 << 30}
    d = T.describe_model(a, dataclasses.replace(a.shape, layers=20), info)
    assert d == ("llama3-70b shape, 20 of 80 layers (reduced from 80 to fit 100 GiB of free "
                 "GPU memory)")
    a = _args("--hidden", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
              "--layers", "2", "--vocab", "1000", "--comms", "cclx", "--fp8-min-bytes", "64K")
    assert a.shape == M.Shape(256, 4, 2, 512, 2, 1000)
    assert a.comm_list == ["nccl", "cclx"] and a.fp8_min_bytes == 65536
    info = {"requested": 2, "layers": 2, "reduced_for_memory": False, "shape_is_preset": False}
    assert T.describe_model(a, a.shape, info) == "custom shape (from llama3-8b), 2 layers"


@pytest.mark.parametrize("argv, msg", [
    (["--graph"], "--graph needs CUDA"),
    (["--comms", "nccl,mpi"], "unknown communicator 'mpi'"),
    (["--heads", "5"], "not a multiple of heads"),
    (["--repeats", "0"], "--repeats too small"),
    (["--iters", "0"], "--iters must be >= 1"),
])
def test_bad_arguments(argv, msg):
    with pytest.raises(SystemExit) as e:
        _args(*argv)
    assert msg in str(e.value)


def test_parse_count_and_list():
    assert T.parse_count("4K") == 4096 and T.parse_count("16M") == 16 << 20
    assert T.parse_count("16MiB") == 16 << 20 and T.parse_count("100") == 100
    assert T.parse_list("1,8, 32") == [1, 8, 32]
    for bad in ("x", "1,0", "", "16Mi"):
        with pytest.raises(Exception):
            T.parse_list(bad)


def test_cli_help():
    r = subprocess.run([sys.executable, "-m", "cclx.bench", "tp", "--help"],
                       env=harness.child_env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for flag in ("--preset", "--kv-heads", "--mode", "--graph", "--eager", "--fp8-min-bytes",
                 "--json", "--plot", "--warmup", "--iters"):
        assert flag in r.stdout
    r = subprocess.run([sys.executable, "-m", "cclx.bench"], env=harness.child_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "tp" in r.stderr


# ----------------------------------------------------------------------------- arithmetic
def _layer(h, hq, hkv, hd, f):
    return h * (hq + 2 * hkv) * hd + hq * hd * h + 2 * h * f + f * h + 2 * h


@pytest.mark.parametrize("name, tp", [("llama3-8b", 1), ("llama3-8b", 2), ("llama3-8b", 8),
                                      ("llama3-70b", 1), ("llama3-70b", 4),
                                      ("llama3-70b", 8)])
def test_params_per_rank(name, tp):
    s = M.PRESETS[name]
    hd = 128
    per_layer = _layer(s.hidden, s.heads // tp, s.kv_heads // tp, hd, s.ffn // tp)
    vocab_rows = -(-s.vocab // tp)
    want = s.vocab * s.hidden + vocab_rows * s.hidden + s.layers * per_layer + s.hidden
    p = M.params_per_rank(s, tp)
    assert p["per_layer"] == per_layer and p["total"] == want
    assert M.weight_bytes(s, tp, 2) == 2 * want


def test_preset_totals():
    assert M.params_per_rank(M.PRESETS["llama3-8b"], 1)["total"] == 8_030_261_248
    assert M.params_per_rank(M.PRESETS["llama3-70b"], 1)["total"] == 70_553_706_496
    # 8 ranks: 1/8 of every layer and of the LM head, the whole embedding
    p = M.params_per_rank(M.PRESETS["llama3-8b"], 8)
    assert p["per_layer"] == 27_271_168 and p["lm_head"] == 16032 * 4096
    assert p["total"] == 1_463_685_120


def test_allreduce_bytes_per_step():
    s8, s70 = M.PRESETS["llama3-8b"], M.PRESETS["llama3-70b"]
    d = M.allreduce_per_step(s8, 64, 2)  # decode, batch 64: one token per sequence
    assert d == {"calls": 64, "bytes_per_call": 64 * 4096 * 2, "bytes_per_step": 64 * 524288}
    assert M.allreduce_per_step(s8, 1, 2)["bytes_per_call"] == 8192
    d = M.allreduce_per_step(s70, 8192, 2)  # prefill of 8192 tokens
    assert d["calls"] == 160 and d["bytes_per_call"] == 128 << 20
    assert d["bytes_per_step"] == 160 * (128 << 20)
    assert M.allreduce_per_step(s8, 1024, 2)["bytes_per_call"] == 8 << 20  # < 16 MiB: no FP8
    assert M.allreduce_per_step(s8, 4096, 2)["bytes_per_call"] == 32 << 20


def test_shards_and_kv():
    s70 = M.PRESETS["llama3-70b"]
    sh = M.shard(s70, 8, 3)
    assert (sh.heads, sh.kv_heads, sh.q_off, sh.kv_off, sh.ffn) == (8, 1, 24, 3, 3584)
    sh = M.shard(s70, 16, 5)  # more ranks than KV heads: one replicated KV head per rank
    assert (sh.heads, sh.kv_heads, sh.q_off, sh.kv_off) == (4, 1, 20, 2)
    assert (5 * 4) // (64 // 8) == sh.kv_off  # its query heads belong to that KV head
    last = M.shard(M.Shape(64, 8, 2, 96, 1, 101), 4, 3)
    assert (last.vocab, last.vocab_off, last.vocab_valid) == (26, 78, 23)
    kv = M.kv_bytes(M.PRESETS["llama3-8b"], 1, 64, 4096, 2)
    assert kv == 2 * 32 * 64 * 8 * 4096 * 128 * 2 == 32 << 30
    with pytest.raises(ValueError, match="do not split over 3 ranks"):
        M.shard(M.PRESETS["llama3-8b"], 3, 0)
    with pytest.raises(ValueError, match="one must divide the other"):
        M.check_shape(M.Shape(96, 24, 4, 96, 1, 10), 6)


def test_fit_layers():
    s70, s8 = M.PRESETS["llama3-70b"], M.PRESETS["llama3-8b"]
    gib = 1 << 30
    n = M.fit_layers(s70, 1, 2, 132 * gib, 64, 4096, 8192, 3 * gib)
    assert 20 < n < 80
    per = M.layer_params(s70, 1) * 2 + M.kv_bytes(dataclasses.replace(s70, layers=1), 1, 64,
                                                  4096, 2)
    assert M.fit_layers(s70, 1, 2, 132 * gib + per, 64, 4096, 8192, 3 * gib) == n + 1
    assert M.fit_layers(s8, 8, 2, 132 * gib, 64, 4096, 8192, 3 * gib) == 32
    assert M.fit_layers(s70, 1, 2, 4 * gib, 1, 1024, 1024, 3 * gib) == 0


# ----------------------------------------------------------------------------- torch
def test_hash_fill_shards_compose():
    torch = _torch()
    full = M.hash_fill_(torch.empty(37, 29), (37, 29), (0, 0), 11, 0.5)
    assert float(full.abs().max()) <= 0.5 and float(full.std()) > 0.2
    part = M.hash_fill_(torch.empty(10, 7), (37, 29), (20, 13), 11, 0.5)
    assert torch.equal(part, full[20:30, 13:20])
    other = M.hash_fill_(torch.empty(37, 29), (37, 29), (0, 0), 12, 0.5)
    assert not torch.equal(other, full)


CASES = os.path.join(HERE, "cases_bench_tp.py")


@pytest.fixture(scope="module")
def tp_results():
    _torch()
    return harness.run(CASES, 2, timeout=300)


def test_forward_into_given_buffers():
    """out= (how nccl-sym places the row-parallel outputs in its windows): the same step, the
    projections written into the given memory, the allreduces called on exactly that memory."""
    torch = _torch()
    shape = M.Shape(hidden=64, heads=4, kv_heads=2, ffn=128, layers=2, vocab=101)
    mdl = M.TPLlama(shape, 2, 1, torch.device("cpu"), torch.float32, seed=3, max_positions=16)
    tokens = mdl.tokens(2, 5)
    seen, alive = [], []

    def reduce(t):
        seen.append(t.data_ptr())
        alive.append(t)  # kept, so that later buffers cannot take its address
        t.mul_(2.0)  # stands for the sum over two ranks holding the same values

    # The given buffers live across both passes, so the reference pass's temporaries can never
    # share their addresses (a freed temporary's address may be reused by a later allocation).
    bufs = [torch.full((2 * 5 * 64 + 7,), float("nan")) for _ in range(2)]
    ref = mdl.forward(tokens, 0, mdl.new_cache(2, 16), reduce)
    ref_ptrs, seen[:] = list(seen), []
    asked = []

    def out(slot, rows, cols):
        asked.append((slot, rows, cols))
        return bufs[slot][:rows * cols].view(rows, cols)

    got = mdl.forward(tokens, 0, mdl.new_cache(2, 16), reduce, out)
    assert asked == [(0, 10, 64), (1, 10, 64)] * 2
    assert seen == [bufs[0].data_ptr(), bufs[1].data_ptr()] * 2  # reduced where written
    assert len(set(ref_ptrs)) > 1 and set(ref_ptrs).isdisjoint(seen)
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(got[0]).all()


@pytest.mark.parametrize("case", ["decode_gqa", "prefill_gqa", "decode_kv_replicated",
                                  "prefill_kv_replicated", "sp_decode_gqa",
                                  "sp_prefill_kv_replicated", "decode_gqa_fused",
                                  "prefill_kv_replicated_fused"])
def test_forward_two_ranks_matches_one(tp_results, case):
    harness.check(tp_results, case)


TINY = ["--hidden", "64", "--heads", "4", "--kv-heads", "2", "--ffn", "128", "--layers", "2",
        "--vocab", "101", "--batch", "1,4", "--context", "16", "--tokens", "32,64",
        "--iters", "2", "--warmup", "1", "--repeats", "2", "--fp8-min-bytes", "16K"]


def test_tool_two_cpu_ranks(tmp_path):
    _torch()
    j, p = tmp_path / "tp.json", tmp_path / "tp.png"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(harness.free_port()), "-m", "cclx.bench", "tp", *TINY,
           "--json", str(j), "--plot", str(p)]
    r = subprocess.run(cmd, env=harness.child_env(), capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "custom shape (from llama3-8b), 2 layers | TP 2 (cpu, 2 processes)" in r.stdout
    assert "dropin: not measured" in r.stdout and "PASSED" in r.stdout
    assert "nccl-sym: not measured (CUDA only)" in r.stdout
    assert r.stdout.count("cclx-bench tp summary") == 1  # rank 0 only
    assert "[4/4] prefill eager tokens 64" in r.stderr and r.stderr.count("[1/4]") == 1
    data = json.loads(j.read_text())
    assert data["meta"]["world_size"] == 2 and data["summary"]["passed"]
    rows = data["results"]
    assert [(x["mode"], x["exec"], x["batch"], x.get("context", x.get("tokens")))
            for x in rows] == [("decode", "eager", 1, 16), ("decode", "eager", 4, 16),
                               ("prefill", "eager", 1, 32), ("prefill", "eager", 1, 64)]
    for x in rows:
        res = x["results"]
        assert x["allreduce"]["calls"] == 4
        assert x["allreduce"]["bytes_per_call"] == x["step_tokens"] * 64 * 4
        assert res["gloo"]["check"] == "ref" and res["cclx"]["check"] == "ok"
        assert res["cclx"]["logits_rel_err"] < 1e-4 and res["cclx"]["top1_agree"] == 1.0
        # the fused allreduce + add + norm: float32 roundings of the norm in another order
        assert res["cclx-fused"]["check"] == "ok" and res["cclx-fused"]["logits_rel_err"] < 1e-4
        for n, d in res.items():
            assert d["ms"] > 0 and d["tok_s"] > 0
        assert 0 <= res["skip"]["ms"]
        # FP8 from 16 KiB: the prefill of 64 tokens (16 KiB per allreduce) only
        fp8 = x["allreduce"]["bytes_per_call"] >= 16384
        assert ("cclx-fp8" in res) == fp8, x
        if fp8:
            f = res["cclx-fp8"]
            assert f["check"] == "fp8" and 0 < f["hidden_rel_err"] < 0.5
            assert 0.0 <= f["top1_agree"] <= 1.0
    assert p.exists() and p.stat().st_size > 1000


def test_tool_sequence_parallel_two_cpu_ranks(tmp_path):
    """--parallel sp: all-gather + reduce-scatter through every communicator, checked against
    the gloo reference; nccl-sym says why it has no such form."""
    _torch()
    j = tmp_path / "sp.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(harness.free_port()), "-m", "cclx.bench", "tp", *TINY,
           "--parallel", "sp", "--mode", "decode", "--batch", "3", "--json", str(j)]
    r = subprocess.run(cmd, env=harness.child_env(), capture_output=True, text=True,
                       timeout=300, cwd=str(tmp_path))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "# sequence parallel:" in r.stdout and "PASSED" in r.stdout
    data = json.loads(j.read_text())
    assert data["meta"]["parallel"] == "sp" and data["summary"]["passed"]
    for x in data["results"]:
        res = x["results"]
        assert res["gloo"]["check"] == "ref" and res["cclx"]["check"] == "ok"
        assert res["cclx"]["logits_rel_err"] < 1e-4 and res["cclx"]["top1_agree"] == 1.0
        assert "nccl-sym" not in res and res["skip"]["ms"] >= 0


def test_tool_plot_needs_matplotlib(tmp_path):
    _torch()
    env = harness.child_env()
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "matplotlib.py").write_text("raise ImportError('no matplotlib here')\n")
    env["PYTHONPATH"] = str(shim) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-m", "cclx.bench", "tp", *TINY, "--plot",
                        str(tmp_path / "x.png")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode != 0 and "--plot needs matplotlib" in r.stderr
