"""bench/soak.py stays runnable and its checks stay sharp: a 300-call smoke on 3 CPU ranks, one
with a late rank (every rank must see the error, naming the late rank), and the reference
functions against hand-computed results and deliberately wrong outputs."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import harness

BENCH = os.path.join(harness.ROOT, "bench")
sys.path.insert(0, BENCH)
import soak_ref as R  # noqa: E402

# bench/soak.py draws bf16 calls (ml_dtypes gives numpy its bfloat16)
NEEDS_ML_DTYPES = pytest.mark.skipif(R.ml_dtypes is None, reason="needs ml_dtypes (bf16 in numpy)")
BF16 = pytest.param("bf16", marks=NEEDS_ML_DTYPES)


def run_soak(tmp_path, *args):
    out = str(tmp_path / "soak.json")
    r = subprocess.run([sys.executable, os.path.join(BENCH, "soak.py"), "--ranks", "3",
                        "--calls", "300", "--max-bytes", "256K", "--json", out, *args],
                       env=harness.child_env(), capture_output=True, text=True, timeout=300)
    res = json.load(open(out)) if os.path.exists(out) else {}
    return r, res


@NEEDS_ML_DTYPES
def test_soak_smoke(tmp_path):
    r, res = run_soak(tmp_path, "--seed", "7")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert res["ok"] and res["complete"] and res["calls"] >= 295 and res["wrong_elements"] == 0, res
    assert res["errors"] == 0 and res["late_events"] == 0, res
    kinds = {k.split("/")[0] for k in res["kinds"]}
    for k in ("allreduce", "all_gather_single", "reduce_scatter_single", "all_to_all_v",
              "broadcast", "p2p", "window", "rmsnorm"):
        assert k in kinds, (k, sorted(kinds))
    assert res["odd_count_calls"] > 0 and len(res["commit"]) >= 40


def test_soak_workers_that_cannot_start_are_not_ok(tmp_path):
    # ranks that die before their first call leave every counter at zero: the run must read as
    # failed, not as "0 wrong"
    env = dict(harness.child_env(), PYTHONPATH=str(tmp_path), CCLX_EXT_DIR=str(tmp_path))
    out = str(tmp_path / "soak.json")
    r = subprocess.run([sys.executable, os.path.join(BENCH, "soak.py"), "--ranks", "2",
                        "--calls", "50", "--json", out], env=env, capture_output=True,
                       text=True, timeout=120)
    res = json.load(open(out))
    assert r.returncode != 0 and res["calls"] == 0, res
    assert not res["ok"] and not res["complete"], res
    assert "FAILED" in r.stdout, r.stdout


@NEEDS_ML_DTYPES
def test_soak_late_rank_smoke(tmp_path):
    r, res = run_soak(tmp_path, "--seed", "3", "--late-every", "150", "--timeout", "1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert res["late_events"] == 1 and res["comms_created"] == 2, res
    assert res["late_errors_seen"] == 3 and res["late_errors_naming_rank"] == 3, res
    # the comm is created with a 60 s timeout and then set to --timeout: errors name the latter
    assert res["late_messages"] and all("1000 ms" in m and "60000" not in m
                                        for m in res["late_messages"]), res["late_messages"]
    assert res["wrong_elements"] == 0 and res["errors"] == 0, res


@NEEDS_ML_DTYPES
def test_soak_segments_join(tmp_path):
    """A run split at a fixed item (--stop-item, then --start-item there) runs exactly the calls
    of the whole run, and --combine adds the segments up; a gap between segments is refused."""
    whole = tmp_path / "whole"
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (whole, a, b):
        d.mkdir()
    r, full = run_soak(whole, "--seed", "11")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r, one = run_soak(a, "--seed", "11", "--stop-item", "40")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert one["stopped_early"] and one["next_item"] == 40 and 0 < one["calls"] < full["calls"]
    r, two = run_soak(b, "--seed", "11", "--start-item", "40")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert two["config"]["start_item"] == 40 and not two["stopped_early"]
    assert one["calls"] + two["calls"] == full["calls"], (one["calls"], two["calls"], full)
    out = tmp_path / "all.json"
    soak = os.path.join(BENCH, "soak.py")
    r = subprocess.run([sys.executable, soak, "--combine", str(a / "soak.json"),
                        str(b / "soak.json"), "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.load(open(out))
    assert res["calls"] == full["calls"] and res["ok"] and res["complete"], res
    assert {k: v["calls"] for k, v in res["kinds"].items()} == \
        {k: v["calls"] for k, v in full["kinds"].items()}
    assert [s["start_item"] for s in res["segments"]] == [0, 40]
    r = subprocess.run([sys.executable, soak, "--combine", str(b / "soak.json"),
                        str(a / "soak.json")], capture_output=True, text=True)
    assert r.returncode != 0 and "starts at item" in (r.stdout + r.stderr)
    # Segments of different commits are refused unless asked for, and then each is named.
    seg = json.load(open(b / "soak.json"))
    seg["commit"] = "0" * 40
    json.dump(seg, open(b / "soak.json", "w"))
    r = subprocess.run([sys.executable, soak, "--combine", str(a / "soak.json"),
                        str(b / "soak.json")], capture_output=True, text=True)
    assert r.returncode != 0 and "--mixed-commits" in (r.stdout + r.stderr)
    r = subprocess.run([sys.executable, soak, "--combine", str(a / "soak.json"),
                        str(b / "soak.json"), "--mixed-commits", "--json", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.load(open(out))
    assert [s["commit"] for s in res["segments"]] == [one["commit"], "0" * 40]
    assert res["commit"] == f"{one['commit']} + {'0' * 40}" and res["calls"] == full["calls"]


def test_reference_rules():
    # f16 sums accumulate in float over ranks 0..N-1 and round once: 2048 + 1 + 1 is 2050 in
    # float, while rounding after each step (f16 spacing 2 at 2048) would give 2048.
    xs = [np.array([2048.0], np.float16), np.array([1.0], np.float16),
          np.array([1.0], np.float16)]
    assert R.reduce_exact(xs, "SUM", "f16")[0] == np.float16(2050.0)
    # f32 keeps the rank order: (1e8 + 1) - 1e8 = 0 in float32, not 1.
    xs = [np.array([1e8], np.float32), np.array([1.0], np.float32),
          np.array([-1e8], np.float32)]
    assert R.reduce_exact(xs, "SUM", "f32")[0] == 0.0
    # Integers wrap like C and AVG truncates toward zero.
    xs = [np.array([100, -7], np.int8), np.array([100, 2], np.int8)]
    assert R.reduce_exact(xs, "SUM", "i8").tolist() == [-56, -5]
    assert R.reduce_exact(xs, "AVG", "i8").tolist() == [-28, -2]
    f = R.reduce_exact([np.array([3.0], np.float32)] * 2, "PREMUL_SUM", "f32", 0.5)
    assert f[0] == 3.0
    # An integer PREMUL_SUM multiplies by the factor converted to the type (truncated).
    xs = [np.array([5, -3], np.int32), np.array([7, 2], np.int32)]
    assert R.reduce_exact(xs, "PREMUL_SUM", "i32", 3.0).tolist() == [36, -3]
    assert R.reduce_exact(xs, "PREMUL_SUM", "i32", 1.25).tolist() == [12, -1]


@pytest.mark.parametrize("dtype", ["f32", BF16, "i32"])
def test_checks_find_wrong_values(dtype):
    pool = R.Pool(5, 1 << 16)
    xs = [pool.input(dtype, 1001, 17, r) for r in range(4)]
    assert not np.array_equal(xs[0], xs[1])  # ranks differ
    assert np.array_equal(pool.input(dtype, 1001, 17, 2), xs[2])  # and regenerate alike
    good = R.reduce_exact(xs, "SUM", dtype)
    assert R.count_wrong_reduce(good, xs, "SUM", dtype) == 0
    bad = good.copy()
    R.bits(bad)[5] ^= 1  # one ulp (or one unit) off
    bad[9] = xs[0][9]  # a stale value: this rank's own input
    assert R.count_wrong_reduce(bad, xs, "SUM", dtype) == 2
    # A failed call: exact or all-ones bytes pass, anything else counts.
    out = good.copy()
    R.bits(out)[:500] = np.iinfo(R.bits(out).dtype).max
    assert R.count_not_exact_or_poison(out, good) == 0
    out[700] = xs[1][700]
    assert R.count_not_exact_or_poison(out, good) == 1


def test_fp8_norm_scales():
    # Per token amax(|y|) / 448; a row of zeros has scale 1 (docs/design/fused-rmsnorm.md, rule 5).
    r = np.array([[0.0, 0.0], [3.0, -4.0]], np.float32)
    w = np.ones(2, np.float32)
    y1 = np.array([3.0, -4.0]) / np.sqrt(12.5 + 1e-6)
    s = np.array([[1.0], [abs(y1).max() / 448]], np.float32)
    q = np.zeros((2, 2), np.float32)
    q[1] = np.round(y1 / s[1, 0])
    assert R.rmsnorm_fp8_wrong(r, w, 1e-6, q, s) == 0
    s0 = s.copy()
    s0[0, 0] = 2.0 ** -126  # the scale a zero row must not get
    assert R.rmsnorm_fp8_wrong(r, w, 1e-6, q, s0) == 1


@pytest.mark.parametrize("dtype", ["f32", BF16])
def test_fp8_call_of_a_failed_item(dtype):
    # An item fails when one of its calls does; an FP8 call issued before the failing one may
    # have completed. Its output passes when each element is within the FP8 bound or poison;
    # its input left in place (stale data) or a far value counts.
    import soak_ops as O
    pool = R.Pool(11, 1 << 16)
    xs = [pool.input(dtype, 2724, 23, r) for r in range(3)]
    ref, _ = R.reduce_f64(xs, "AVG")
    s = {"op": "AVG", "dtype": dtype, "factor": 1.0,
         "hints": {"low_precision": "fp8", "fp8_algo": "oneshot"}}
    near = (ref * (1 + 2.0 ** -5)).astype(R.np_dtype(dtype))  # inside the codec's bound
    assert O._reduction(None, s, xs, near, False) == 0
    assert O._reduction(None, s, xs, near, True) == 0
    out = near.copy()
    R.bits(out)[:1000] = np.iinfo(R.bits(out).dtype).max
    assert O._reduction(None, s, xs, out, True) == 0
    out[1500] = xs[0][1500] * 3 + 1  # far from the mean of three inputs
    assert O._reduction(None, s, xs, out, True) == 1
    assert O._reduction(None, s, xs, xs[0].copy(), True) > 2000  # stale input
    # Data movement with FP8 (all-gather, all-to-all): the same rule.
    want = xs[1]
    assert O._moved(want.copy(), want, True, fp8=True) == 0
    got = want.copy()
    got[3] = want[3] * 2 + 1
    assert O._moved(got, want, True, fp8=True) == 1
