"""cclx-bench accuracy on a tiny configuration: the e4m3 cast against ml_dtypes, the decoder's
hand-written gradients against finite differences, and a run of the tool (MiniLM, 2 layers,
8 sentences, TP 2 on 2 CPU processes; the decoder trained for a few steps): exact TP equals
TP 1 to float tolerance in all three layouts, FP8 changes the output (nonzero error) and stays
under the bound below.

Bound for the tiny run (2 of 6 layers, block 128): 1 - mean cosine <= 2e-3 and worst cosine
>= 0.995 for every FP8 variant (measured: 4e-5 for one collective kind, 4e-4 for all kinds
together), decoder perplexity within 2% of TP 1.
"""
import json
import subprocess
import sys

import numpy as np
import pytest

import harness
from cclx.bench import acc_bert as B
from cclx.bench import acc_decoder as D
from cclx.bench import acc_model as M


def test_e4m3_cast_matches_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000) * s for s in (1e-4, 1e-2, 1, 30, 1e3)])
    x = np.concatenate([x, [0.0, -0.0, 448.0, 464.0, 1e6, -1e6, 2.0 ** -10, 2.0 ** -9 * 1.5,
                            2.0 ** -11 * 1.01]]).astype(np.float32)
    want = np.clip(x, -448, 448).astype(ml.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(M.e4m3_cast(x), want)


def test_bf16_round_matches_ml_dtypes():
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed")
    x = np.random.default_rng(0).standard_normal(50000).astype(np.float32) * 3
    x = np.concatenate([x, [np.inf, -np.inf, 0.0, -0.0, 3e38, 1e-40]]).astype(np.float32)
    np.testing.assert_array_equal(M.bf16_round(x), x.astype(ml.bfloat16).astype(np.float32))


def test_decoder_gradients():
    cfg = D.Cfg(dim=16, heads=4, layers=2, ffn=32, ctx=8)
    rng = np.random.default_rng(1)
    p = {k: v.astype(np.float64) for k, v in D.init(cfg, len(D.CHARS), rng).items()}
    for k in p:  # away from the initialization's symmetric point
        p[k] += rng.standard_normal(p[k].shape) * 0.1
    tok = rng.integers(0, len(D.CHARS), (3, 9))
    _, g = D.loss_and_grads(p, cfg, tok)
    for k in ("out", "gf", "0.wq", "0.wk", "0.wv", "0.wo", "0.w1", "1.w2", "1.g1", "1.g2",
              "pos"):
        idx = tuple(int(rng.integers(0, s)) for s in p[k].shape)
        p[k][idx] += 1e-6
        hi, _ = D.loss_and_grads(p, cfg, tok)
        p[k][idx] -= 2e-6
        lo, _ = D.loss_and_grads(p, cfg, tok)
        p[k][idx] += 1e-6
        num = (hi - lo) / 2e-6
        assert abs(num - g[k][idx]) <= 1e-5 + 1e-3 * abs(num), (k, num, g[k][idx])


def test_accuracy_tiny_run(tmp_path):
    miss = B.missing()
    if miss:
        pytest.skip("cclx-bench accuracy needs " + ", ".join(miss) + " (pip install "
                    "'cclx[accuracy]')")
    out = tmp_path / "res"
    env = harness.child_env({"XDG_CACHE_HOME": str(tmp_path / "cache")})
    r = subprocess.run([sys.executable, "-m", "cclx.bench", "accuracy", "--tp", "2",
                        "--decoder-tp", "2", "--blocks", "128", "--no-cast", "--sentences", "8",
                        "--layers", "2", "--decoder-steps", "4", "--decoder-seqs", "4",
                        "--out", str(out)], env=env, capture_output=True, text=True,
                       timeout=240, cwd=str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "encoder TP 2 block 128" in r.stdout and "| exact tp |" in r.stdout
    data = json.loads((out / "accuracy.json").read_text())
    assert data["machine"].startswith("cpu, ") and "commit" in data
    assert (out / "accuracy.md").exists()
    enc = data["results"]["encoder"]
    assert enc["tp1_vs_plain_max_abs"] < 1e-5
    rows = {(x["variant"], x["block"]): x for x in enc["rows"]}
    for lay in ("tp", "sp", "a2a"):
        assert rows[(f"exact {lay}", None)]["max_abs"] < 1e-5, lay
    for kind in ("allreduce", "reduce-scatter", "all-gather", "all-to-all", "all"):
        x = rows[(f"fp8 {kind}", 128)]
        assert x["max_abs"] > 0, kind
        assert 1 - x["cos_mean"] <= 2e-3 and x["cos_min"] >= 0.995, (kind, x)
        assert set(x["bytes"]) >= set(M.KINDS if kind == "all" else [kind])
    dec = {(x["variant"], x["block"]): x for x in data["results"]["decoder"]["rows"]}
    for lay in ("tp", "sp", "a2a"):
        assert dec[(f"exact {lay}", None)]["max_abs"] < 1e-4, lay
    assert rows[("bf16 all", None)]["max_abs"] > 0
    x = dec[("fp8 all", 128)]
    assert x["max_abs"] > 0 and abs(x["ppl_rel"]) < 0.02
