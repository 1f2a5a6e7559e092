"""torch.distributed (backend "nccl") at 2, 3, 4 and 8 ranks on ONE GPU through the cclx NCCL
drop-in (`cclx-nccl run -- torchrun ...`), where NCCL itself refuses ranks that share a GPU: one
torchrun per world size runs every case of dropin_shared_worker.py in one process group (every
c10d collective and point-to-point pattern, every dtype, async handles, CUDA-graph replay,
new_group, torch's cost estimator), each result bit-equal to a reference computed by the drop-in's
rules on the CPU (CCLX_TEST_RANKS picks other sizes: gpu_env.world_sizes). Then a rank
killed mid-loop at 3 ranks: every survivor's error names it within the timeout (and
examples/tp_mlp.py at 4 ranks; each skips where CCLX_TEST_RANKS leaves its size out). The CPU twin of the dispatch is tests/cpp/dropin/test_dropin_shared*.cc."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if not (torch.cuda.is_available() and torch.cuda.device_count() >= 1):
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
import cclx  # noqa: E402

if not cclx._C.has_cuda:
    pytest.skip("cclx was built without CUDA", allow_module_level=True)
import harness  # noqa: E402
from gpu_env import note_world_size, require_world_size, world_sizes  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(HERE, "dropin_shared_worker.py")
FIRST_GPU = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
# eager: init_process_group(device_id=...) (new_group by ncclCommSplit); lazy: comms at first use
# (each send/recv pair gets a comm of its own); 4 ranks also run NCCL's nonblocking mode.
SETUPS = {2: ("eager", {}), 3: ("lazy", {}), 4: ("eager", {"TORCH_NCCL_USE_COMM_NONBLOCKING": "1"}),
          8: ("eager", {})}


def dropin_env(extra):
    env = harness.child_env({"CUDA_VISIBLE_DEVICES": FIRST_GPU, "NCCL_NVLS_ENABLE": "0",
                             "CCLX_ABORT_ON_ERROR": "0", "CCLX_TIMEOUT": "120",
                             "CCLX_DEBUG": "INFO", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"})
    env.update(extra)
    return env


def launch_cmd(args):
    return [sys.executable, "-m", "cclx.dropin", "run", "--"] + args


@pytest.mark.parametrize("n", world_sizes(sorted(SETUPS)))
def test_torch_distributed_on_one_gpu(request, n, tmp_path):
    note_world_size(request, n)
    mode, extra = SETUPS.get(n, ("eager", {}))
    out = tmp_path / "out"
    out.mkdir()
    cmd = launch_cmd([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n),
                      "--master-port", str(harness.free_port()), WORKER, str(out), mode])
    t0 = time.time()
    r = subprocess.run(cmd, env=dropin_env(extra), capture_output=True, text=True, timeout=420)
    log = r.stdout + r.stderr
    (tmp_path / "log.txt").write_text(log)
    print(f"{n} ranks ({mode}{' nonblocking' if extra else ''}): {time.time() - t0:.1f} s")
    results = {}
    for rank in range(n):
        p = out / f"rank{rank}.json"
        results[rank] = json.loads(p.read_text()) if p.exists() else {"cases": {}, "done": False}
    failures = [f"rank {rank} {name}: {v}" for rank, res in results.items()
                for name, v in res["cases"].items() if v.startswith("FAIL")]
    assert not failures, "\n".join(failures)[:6000] + "\n" + log[-3000:]
    assert all(res["done"] for res in results.values()), log[-6000:]
    assert r.returncode == 0, log[-6000:]
    # Every comm ran without NCCL underneath (the drop-in said so), and NCCL never refused one.
    assert "ranks share a GPU: a cclx comm" in log, log[-3000:]
    assert "invalid usage" not in log.lower(), log[-3000:]
    skips = sorted({f"{name}: {v}" for res in results.values() for name, v in res["cases"].items()
                    if v.startswith("skip")})
    cases = len(results[0]["cases"])
    print(f"{n} ranks: {cases} cases passed on every rank" + (f"; skipped: {skips}" if skips else ""))


def test_killed_rank_is_named_by_every_survivor(request, tmp_path):
    n, timeout = 3, 15
    require_world_size(n)
    note_world_size(request, n)
    victim = n - 1
    port = harness.free_port()
    procs = []
    t0 = time.time()
    for rank in range(n):  # not torchrun: its agent would stop the survivors itself
        env = dropin_env({"CCLX_TIMEOUT": str(timeout), "RANK": str(rank), "WORLD_SIZE": str(n),
                          "LOCAL_RANK": str(rank), "LOCAL_WORLD_SIZE": str(n),
                          "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        log = open(tmp_path / f"rank{rank}.log", "w")
        procs.append((subprocess.Popen(launch_cmd([sys.executable, WORKER, str(tmp_path), "kill"]),
                                       env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for p, log in procs:
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()
    took = time.time() - t0
    logs = [(tmp_path / f"rank{r}.log").read_text() for r in range(n)]
    assert "VICTIM" in logs[victim], logs[victim][-3000:]
    for rank in range(n - 1):
        text = logs[rank]
        # The error names the dead rank: the survivor's own exception, or torch's watchdog, which
        # found it through ncclCommGetAsyncError (torch's default handling ends the process).
        named = re.search(rf"cclx: .*rank\(s\) {victim}\b", text)
        assert named, f"rank {rank} does not name rank {victim}:\n{text[-4000:]}"
        m = re.search(r"SURVIVOR_ERROR rank \d+ after ([0-9.]+) s", text)
        if m:
            assert float(m.group(1)) < timeout + 20, text[-3000:]
        assert "saw no error" not in text, text[-3000:]
        bad = re.search(r"output after the kill: nan=False", text)
        assert not bad, f"rank {rank} got a plausible value from a failed call:\n{text[-3000:]}"
    print(f"killed rank: every survivor named rank {victim}; {took:.1f} s in all")


def test_tp_mlp_example_on_one_gpu(request):
    """examples/tp_mlp.py as docs/DROPIN.md shows it: 4 ranks on one GPU through the drop-in."""
    require_world_size(4)
    note_world_size(request, 4)
    ex = os.path.join(harness.ROOT, "examples", "tp_mlp.py")
    cmd = launch_cmd([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "4",
                      "--master-port", str(harness.free_port()), ex])
    r = subprocess.run(cmd, env=dropin_env({}), capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert out.count(": OK") == 4, out[-4000:]
    assert "ranks share a GPU: a cclx comm" in out, out[-3000:]
