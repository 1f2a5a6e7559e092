"""Launch and rendezvous as a new user meets them, each scenario on its own group of processes
(tests/python/rdv_worker.py): a rank that never starts is named on every other rank within the
timeout (also rank 0, which serves the store); a rank that fails on a setting, a device or in
new_comm makes the others fail at once with its message; jobs of different CCLX_JOB_ID, or
ranks of different CCLX_STORE_TOKEN, do not mix (a clear error, never a hang); a routable
MASTER_ADDR needs a token; rank 0 leaves only after the others finalized; an unknown CCLX_* name draws one warning;
torchrun works without torch imported first."""
import json
import os
import subprocess
import sys

import pytest

import harness

WORKER = os.path.join(harness.HERE, "rdv_worker.py")

# name: (ranks, ranks that never start, env of every rank, env per rank)
SCENARIOS = {
    "rank0_missing": (3, [0], {"CCLX_TIMEOUT_MS": "5000"}, {}),
    "rank3_missing": (4, [3], {"RDV_KW": '{"timeout": 3}'}, {}),
    "bad_setting_rank1": (3, [], {"RDV_KW": '{"timeout": 60}'}, {1: {"CCLX_TIMEOUT_MS": "abc"}}),
    "bad_setting_rank0": (3, [], {"RDV_KW": '{"timeout": 60}'}, {0: {"CCLX_TIMEOUT_MS": "abc"}}),
    "bad_setting_all": (3, [], {"RDV_KW": '{"timeout": 60}', "CCLX_TIMEOUT_MS": "abc"}, {}),
    "bad_device_rank2": (3, [], {"RDV_KW": '{"timeout": 60}'}, {2: {"RDV_DEVICE": "tpu"}}),
    "bad_hint_rank1": (2, [], {}, {1: {"RDV_KW": '{"timeout": 60, "hints": {"algoo": "x"}}'}}),
    "job_mismatch": (2, [], {"RDV_KW": '{"timeout": 2}'},
                     {0: {"CCLX_JOB_ID": "jobA"}, 1: {"CCLX_JOB_ID": "jobB"}}),
    "same_job": (2, [], {"CCLX_JOB_ID": "jobA"}, {}),
    "token_mismatch": (2, [], {"RDV_KW": '{"timeout": 4}'},
                       {0: {"CCLX_STORE_TOKEN": "a" * 32}, 1: {"CCLX_STORE_TOKEN": "b" * 32}}),
    # 0.0.0.0 is not a loopback address: a token is needed (set, or drawn through torch's store).
    "routable_no_token": (2, [], {"RDV_KW": '{"timeout": 20}'},
                          {r: {"MASTER_ADDR": "0.0.0.0"} for r in (0, 1)}),
    "routable_token": (2, [], {"CCLX_STORE_TOKEN": "c" * 32},
                       {r: {"MASTER_ADDR": "0.0.0.0"} for r in (0, 1)}),
    "torchrun_no_agent_routable": (2, [], {"TORCHELASTIC_RUN_ID": "routable", "RDV_INIT_PG": "1",
                                           "TORCHELASTIC_USE_AGENT_STORE": "False"},
                                   {r: {"MASTER_ADDR": "0.0.0.0"} for r in (0, 1)}),
    "finalize_order": (3, [], {}, {0: {"RDV_EXIT": "1"}, 2: {"RDV_FINALIZE_DELAY": "0.7"}}),
    "unknown_setting": (2, [], {"CCLX_TIMEOUTMS": "5"}, {}),
    # torchrun whose agent serves no store: rank 0 serves torch's (multi-tenant) on MASTER_PORT.
    "torchrun_no_agent": (2, [], {"TORCHELASTIC_RUN_ID": "no-agent", "RDV_INIT_PG": "1",
                                  "TORCHELASTIC_USE_AGENT_STORE": "False"}, {}),
}


def _launch(name):
    n, absent, common, per = SCENARIOS[name]
    port = harness.free_port()
    procs = {}
    for r in range(n):
        if r in absent:
            continue
        env = harness.child_env(common)
        env.pop("CCLX_DEBUG", None)
        env.update(RANK=str(r), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.update(per.get(r, {}))
        procs[r] = subprocess.Popen([sys.executable, WORKER], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    return procs


def _torchrun(cwd):
    """The launch examples/hello_cpu.py documents, with nothing importing torch first."""
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                             "2", os.path.join(harness.ROOT, "examples", "hello_cpu.py")],
                            env=harness.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=cwd)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every scenario at once (they take seconds of waiting, little CPU), and torchrun beside
    them: {name: {rank: run}}."""
    try:
        import torch.distributed.run  # noqa: F401
        tr = _torchrun(str(tmp_path_factory.mktemp("torchrun")))
    except ImportError:
        tr = None
    started = {name: _launch(name) for name in SCENARIOS}
    out = {}
    if tr is not None:
        try:
            stdout, stderr = tr.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            tr.kill()
            stdout, stderr = tr.communicate()
        out["torchrun"] = {"rc": tr.returncode, "stdout": stdout, "log": stdout + stderr}
    for name, procs in started.items():
        out[name] = {}
        for r, p in procs.items():
            try:
                stdout, stderr = p.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                stdout, stderr = p.communicate()
            res = [json.loads(line[7:]) for line in stdout.splitlines()
                   if line.startswith("RESULT ")]
            out[name][r] = {"rc": p.returncode, "res": res[0] if res else None,
                            "log": stdout + stderr}
    return out


def _results(runs, name):
    got = runs[name]
    for r, run in got.items():
        assert run["res"] is not None, f"{name} rank {r} gave no result:\n{run['log']}"
    return {r: run["res"] for r, run in got.items()}


def test_rank0_never_starts(runs):
    """CCLX_TIMEOUT_MS=5000 bounds connecting to the store: every other rank fails within 10 s
    with a timeout naming rank 0."""
    for r, res in _results(runs, "rank0_missing").items():
        assert not res["ok"] and res["isinstance"]["CclxTimeoutError"], (r, res)
        assert "rank 0" in res["msg"] and res["s"] < 10, (r, res)


def test_rank3_never_starts(runs):
    """Ranks 0..2 each raise CclxTimeoutError naming rank 3 within the timeout + 2 s."""
    res = _results(runs, "rank3_missing")
    assert sorted(res) == [0, 1, 2]
    for r, x in res.items():
        assert not x["ok"] and x["isinstance"]["CclxTimeoutError"], (r, x)
        assert "rank(s) 3 did not arrive" in x["msg"] and x["s"] < 5, (r, x)


def _fail_at_once(res, bad, text):
    """The ranks in `bad` fail on their own within 3 s with `text`; every other rank fails with
    'rank B failed: <text>' within 3 s of the first bad rank's failure (not after its own 60 s
    timeout; process start-up times differ, so each is measured from what it waits for)."""
    first = min(res[b]["failed_at"] for b in bad)
    for r, x in res.items():
        assert not x["ok"], (r, x)
        if r in bad:
            assert x["msg"] == text and x["s"] < 3, (r, x)
        else:
            assert x["msg"] == f"rank {bad[0]} failed: {text}", (r, x)
            assert x["failed_at"] - first < 3 and x["s"] < 30, (r, x)


@pytest.mark.parametrize("name,bad", [("bad_setting_rank1", [1]), ("bad_setting_rank0", [0]),
                                      ("bad_setting_all", [0, 1, 2])])
def test_bad_setting_fails_every_rank_at_once(runs, name, bad):
    res = _results(runs, name)
    _fail_at_once(res, bad, "CCLX_TIMEOUT_MS='abc' is not an integer in [1, 1099511627776]")
    for b in bad:
        assert res[b]["isinstance"]["CclxInvalidArgument"], res[b]


def test_bad_device_fails_every_rank_at_once(runs):
    _fail_at_once(_results(runs, "bad_device_rank2"), [2],
                  "unsupported device type 'tpu' (cclx supports 'cpu' and 'cuda')")


def test_bad_comm_hint_fails_every_rank_at_once(runs):
    _fail_at_once(_results(runs, "bad_hint_rank1"), [1],
                  "unknown hint 'algoo' (valid hints: algo, low_precision, fp8_algo, fused_algo, put_path)")


def test_job_id_mismatch_is_refused(runs):
    res = _results(runs, "job_mismatch")
    assert not res[1]["ok"] and "serves another job" in res[1]["msg"], res[1]
    assert "'jobB'" in res[1]["msg"] and "jobA" not in res[1]["msg"], res[1]
    assert not res[0]["ok"] and res[0]["isinstance"]["CclxTimeoutError"], res[0]
    assert "rank(s) 1 did not arrive" in res[0]["msg"], res[0]
    same = _results(runs, "same_job")
    assert all(x["ok"] and x["sum"] == 3.0 for x in same.values()), same


def test_store_token_mismatch_is_a_clear_error(runs):
    """Rank 1's token differs from rank 0's: rank 1 fails at once naming CCLX_STORE_TOKEN (no
    token shown), rank 0 names rank 1 at its timeout."""
    res = _results(runs, "token_mismatch")
    assert not res[1]["ok"] and "CCLX_STORE_TOKEN differs" in res[1]["msg"], res[1]
    assert res[1]["s"] < 3 and "aaaa" not in res[1]["msg"] and "bbbb" not in res[1]["msg"], res[1]
    assert not res[0]["ok"] and res[0]["isinstance"]["CclxTimeoutError"], res[0]
    assert "rank(s) 1 did not arrive" in res[0]["msg"], res[0]


def test_routable_address_needs_a_store_token(runs):
    """MASTER_ADDR=0.0.0.0 without CCLX_STORE_TOKEN: every rank refuses at once (rank 0 to serve,
    rank 1 to connect) naming it; with the same token on both, the comm works; under torchrun
    without one, rank 0 draws one and publishes it through torch's store."""
    for r, x in _results(runs, "routable_no_token").items():
        assert not x["ok"] and x["isinstance"]["CclxInvalidArgument"], (r, x)
        assert "CCLX_STORE_TOKEN" in x["msg"] and "loopback" in x["msg"] and x["s"] < 3, (r, x)
    for r, x in _results(runs, "routable_token").items():
        assert x["ok"] and x["sum"] == 3.0, (r, x)
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        return
    for r, x in _results(runs, "torchrun_no_agent_routable").items():
        assert x["ok"] and x["sum"] == 3.0 and x["torch_sum"] == 2.0, (r, x)


def test_store_owner_leaves_after_the_others_finalized(runs):
    """Rank 0 (the store's server) leaves with os._exit right after finalize, while rank 2 is
    still 0.7 s from its own: finalize on rank 0 returns only after rank 2 entered finalize."""
    res = _results(runs, "finalize_order")
    assert all(x["ok"] for x in res.values()), res
    assert res[0]["finalize_end"] >= res[2]["finalize_start"], res
    assert all(run["rc"] == 0 for run in runs["finalize_order"].values())


def test_unknown_setting_warns_once(runs):
    for r, run in runs["unknown_setting"].items():
        assert run["res"] and run["res"]["ok"], run["log"]
        line = "CCLX WARN unknown setting CCLX_TIMEOUTMS (did you mean CCLX_TIMEOUT_MS?)"
        assert run["log"].count(line) == 1, run["log"]


def test_torchrun_without_an_agent_store(runs):
    """Under torchrun with no agent store, cclx meets through a torch TCPStore on MASTER_PORT
    that torch.distributed then shares (cclx never listens on MASTER_PORT there)."""
    pytest.importorskip("torch.distributed")
    res = _results(runs, "torchrun_no_agent")
    for r, x in res.items():
        assert x["ok"] and x["sum"] == 3.0 and x["torch_sum"] == 2.0, (r, x)


def test_torchrun_without_torch_imported_first(runs):
    """torchrun's agent holds MASTER_PORT: cclx meets through the agent's store, importing torch
    itself."""
    if "torchrun" not in runs:
        pytest.skip("torch is not installed")
    r = runs["torchrun"]
    assert r["rc"] == 0, r["log"]
    for rank in (0, 1):
        assert f"rank {rank}: sum 1.0 expected 1.0: OK" in r["stdout"], r["log"]
