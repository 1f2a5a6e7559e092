"""The GPU validation in one run: every GPU GoogleTest binary (tests/cpp/gpu) and every GPU pytest
module (tests/gpu); those whose ranks share a GPU at each world size (default 3, 8, 2 and 4, in
that order), every rank on one GPU. Each step runs under `timeout`, several at once, within a
time budget; bench/verify_summary.py turns the reports into one JSON record and the closing line
`gpu_verify: N passed, N failed, N skipped`. Started by scripts/gpu_verify.sh (run stage), which
documents the settings; `--list` prints the plan.

Steps, in the order they start (the most telling first):
  1. the single-process binaries (device codec, dtype guard, stream temporaries; the suites that
     need one GPU per rank skip on one GPU) and the pytest modules of fixed world size;
  2. for each world size: every binary that takes CCLX_TEST_RANKS (found in its source) and the
     multi-rank pytest modules (those that read it too, tests/gpu/gpu_env.py), a step each;
  3. world size 1 of the modules that run there (the shared suites and those whose default sizes
     start at 1: a2av_device, the MoE buffer), the perf baselines, the MPS soak (alone).
Ranks time-slice the GPU: at most --jobs steps and --gpu-procs rank processes run at once.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import verify_summary as vs  # noqa: E402

TAG = "gpu_verify"
SHARED_RE = re.compile(r"(?<![A-Za-z_])(sharedWorldSize|worldSize)\(|CCLX_TEST_RANKS")
PER_SIZE_RE = re.compile(r"\b(shared_suite|world_sizes|require_world_size)\(")
WS1_RE = re.compile(r"\bshared_suite\(|\bworld_sizes\(\(1\s*,")
# Seconds a step takes at 3 ranks with CCLX_TEST_TIME_SCALE=0.4 (estimates from the full-scale
# records in bench/results, failure cases cut to their scaled timeouts); 8 ranks take about 1.6x.
EXPECT = {"test_gpu_failure": 40, "test_gpu_shared_grouped": 30, "test_gpu_shared_colls": 22,
          "test_gpu_shared_p2p": 20, "test_gpu_a2av_device": 20, "test_gpu_rmsnorm": 18,
          "test_gpu_faults": 15, "test_gpu_shared": 14, "test_gpu_quantized": 14,
          "test_gpu_window": 12, "test_gpu_grow_faults": 10, "test_gpu_window_vmm": 4,
          "py-fixed": 120,
          # pytest modules at one world size (a step each): spawn, setup and every case; from
          # the H200 record of 2026-12-05 at 3 ranks (ten steps at once), divided by 2.5
          "py:test_gpu_rmsnorm": 70, "py:test_gpu_buffer": 60, "py:test_gpu_failure": 65,
          "py:test_gpu_dropin_shared": 60, "py:test_gpu_moe": 60, "py:test_gpu_window": 45,
          "py:test_gpu_a2av_device": 12, "py:test_gpu_memory": 10, "py:test_gpu_quantized": 12,
          "py:test_gpu_persistent": 8, "py:test_gpu_torchcomms": 5,
          "py:test_gpu_rendezvous": 5}
# GPU binaries whose main source is not named after them.
OTHER_SOURCES = {"test_gpu_devapi_torchcomms": "tests/cpp/gpu/devapi/torchcomms_devapi.cc"}
OTHER_SOURCES_WHY = "torchcomms' device-API kernels: scripts/gpu_verify.sh build with .dev/torchcomms"
LATE = ("perf/test_gpu_perf_baselines.py", "perf/test_gpu_soak_mps.py")
EXCLUSIVE = ("perf/test_gpu_soak_mps.py",)  # starts an MPS daemon: runs alone


def say(msg: str) -> None:
    print(f"{TAG}: {msg}", flush=True)


def window_rounds(v: str) -> tuple:
    """"A" or "A,B": rounds of test_gpu_window at 2 ranks, and above (default 2/5 of A)."""
    parts = [int(x) for x in v.split(",")]
    return parts[0], parts[1] if len(parts) > 1 else max(1, parts[0] * 2 // 5)


def sh(*cmd, timeout=30) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def gpus() -> list:
    out = sh("nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader")
    return [g.strip() for g in out.splitlines() if g.strip()]


def one_gpu(a) -> dict:
    """The environment that puts every rank of a step on GPU --gpu ("all": rank r on r % count)."""
    return {} if a.gpu == "all" else {"CUDA_VISIBLE_DEVICES": a.gpu}


def expected_seconds(name: str, n) -> float:
    base = EXPECT.get(name, 20 if name.startswith("test_gpu") else 60)
    return base * (1.0 + 0.12 * max(0, (n or 3) - 3))


# ---- the plan -----------------------------------------------------------------------------------

def cpp_steps(build: str, sizes: list, a) -> list:
    srcs = {os.path.basename(p)[:-3]: p for p in
            glob.glob(os.path.join(ROOT, "tests/cpp/gpu/**/test_gpu_*.cc"), recursive=True)}
    bins = {os.path.basename(p): p for p in glob.glob(os.path.join(build, "tests", "test_gpu_*"))
            if os.access(p, os.X_OK) and not p.endswith((".json", ".log"))}
    for name, src in OTHER_SOURCES.items():  # built only where their inputs are: listed if not
        if name in bins:
            srcs[name] = os.path.join(ROOT, src)
        else:
            a.not_run = getattr(a, "not_run", []) + [f"{name}: not built here ({OTHER_SOURCES_WHY})"]
    single, shared = [], []
    for name in sorted(set(srcs) | set(bins)):
        src = open(srcs[name], errors="replace").read() if name in srcs else ""
        base = {"kind": "gtest", "name": name, "path": bins.get(name),
                "state": "ran" if name in bins else "missing",
                "reason": "" if name in bins else f"{build}/tests/{name} was not built"}
        if SHARED_RE.search(src):
            for n in sizes:
                env = {"CCLX_TEST_RANKS": str(n), **one_gpu(a)}
                if name == "test_gpu_window":
                    env["CCLX_TEST_WINDOW_ROUNDS"] = str(a.window_rounds[0 if n == 2 else 1])
                shared.append(dict(base, id=f"cpp/{name}@{n}", world_size=n, procs=n, env=env,
                                   timeout=240 if n >= 8 or name == "test_gpu_failure" else 150,
                                   tier=1 + sizes.index(n)))
        else:  # one process (or one rank per GPU, all GPUs visible)
            single.append(dict(base, id=f"cpp/{name}", world_size=None, procs=2, env={},
                               timeout=180, tier=0))
    return single + shared


def py_modules() -> tuple:
    per_size, fixed = [], []
    for p in sorted(glob.glob(os.path.join(ROOT, "tests/gpu/**/test_*.py"), recursive=True)):
        rel = os.path.relpath(p, os.path.join(ROOT, "tests/gpu"))
        if rel in LATE:
            continue
        src = open(p, errors="replace").read()
        (per_size if PER_SIZE_RE.search(src) else fixed).append(rel)
    return per_size, fixed


def py_step(sid, targets, n, tier, procs, timeout, group, a) -> dict:
    env = {}
    if n is not None:  # every rank on one GPU; the fixed modules pick their GPUs themselves
        env = {"CCLX_TEST_RANKS": str(n), **one_gpu(a)}
    return {"id": sid, "kind": "pytest", "name": " ".join(targets), "group": group,
            "targets": [os.path.join("tests/gpu", t) for t in targets], "world_size": n,
            "procs": procs, "env": env, "timeout": timeout, "tier": tier, "state": "ran",
            "exclusive": any(t in EXCLUSIVE for t in targets)}


def py_steps(sizes: list, a) -> list:
    """The fixed-size modules in one step; each multi-rank module a step per world size (so
    several run at once); world size 1 of the modules that run there; the late modules."""
    per_size, fixed = py_modules()
    # world size 1 too: the shared suites, and the modules whose default sizes start at 1
    suites = [m for m in per_size if WS1_RE.search(open(os.path.join(ROOT, "tests/gpu", m)).read())]
    steps = [py_step("py/fixed", fixed, None, 0, 4, 420, "py-fixed", a)]
    for n in sizes:
        t = 1 + sizes.index(n)
        for m in per_size:
            base = os.path.basename(m)[:-3]
            steps.append(py_step(f"py/{base}@{n}", [m], n, t, n, 240 if n >= 8 else 180,
                                 f"py:{base}", a))
    late = len(sizes) + 1
    for m in suites:
        base = os.path.basename(m)[:-3]
        steps.append(py_step(f"py/{base}@1", [m], 1, late, 1, 180, f"py:{base}", a))
    for m in LATE:
        if os.path.isfile(os.path.join(ROOT, "tests/gpu", m)):
            steps.append(py_step(f"py/{os.path.basename(m)[:-3]}", [m], None, late, 4, 240,
                                 "py-late", a))
    return steps


def gtest_filter(pos: str, neg: list) -> str:
    """GoogleTest's filter: positive patterns, then '-' and the negative ones."""
    return (pos or "*") + ("-" + ":".join(neg) if neg else "")


def sanitizer_steps(cpp: list, a) -> list:
    """Every binary under each tool of the --sanitize spec (scripts/gpu_sanitize.sh writes it):
    {"tools": {tool: its arguments}, "filters": {binary or "*": positive patterns, null: not
    run}, "exclude": {tool: [negative patterns]}, "scale": CCLX_TEST_TIME_SCALE}."""
    spec = json.loads(a.sanitize)
    a.time_scale = spec.get("scale", a.time_scale)
    steps, a.not_run = [], list(getattr(a, "not_run", []))
    for tool, args in spec["tools"].items():
        for s in cpp:
            pos = spec["filters"].get(s["name"], spec["filters"].get("*", "*"))
            if pos is None:
                a.not_run.append(f"{tool} {s['name']}: {spec.get('why_not_run', {}).get(s['name'], '')}")
                continue
            f = gtest_filter(pos, spec.get("exclude", {}).get(tool, []))
            steps.append(dict(s, id=s["id"].replace("cpp/", tool + "/", 1), tool=tool,
                              tool_args=args.split(), filter=f, timeout=a.step_timeout or 900,
                              procs=max(2, s["procs"]), env=dict(s["env"])))
    return steps


def plan(a) -> list:
    sizes = [int(x) for x in a.sizes.replace(",", " ").split()]
    steps = []
    if a.only in ("all", "cpp"):
        steps += cpp_steps(a.build, sizes, a)
    if a.sanitize:
        steps = sanitizer_steps(steps, a)
    elif a.only in ("all", "py"):
        steps += py_steps(sizes, a)
    if a.match:
        steps = [s for s in steps if re.search(a.match, s["id"])]
    for s in steps:
        s["expect"] = expected_seconds(s.get("group") or s["name"], s["world_size"])
    steps.sort(key=lambda s: (s["tier"], -s["expect"]))  # within a tier the longest first
    return steps


# ---- running ------------------------------------------------------------------------------------

def base_env(a) -> dict:
    env = dict(os.environ)
    env.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1",
               CCLX_ABORT_ON_ERROR="0", CCLX_TEST_TIME_SCALE=str(a.time_scale),
               PYTHONUNBUFFERED="1", CCLX_EXT_DIR=os.path.join(a.build, "python", "cclx"))
    # Dozens of rank processes share the cores: one CPU thread each for torch's host-side
    # references (its default, a thread per core in every process, made them ~10x slower).
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # torch.compile: no worker pool per rank
    libs = [a.build] + [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    env["LD_LIBRARY_PATH"] = ":".join(libs)
    env["PYTHONPATH"] = ":".join([os.path.join(ROOT, "python")] +
                                 [p for p in env.get("PYTHONPATH", "").split(":") if p])
    if "CCLX_NCCL_PIP_DIR" not in env:  # the NCCL of the nvidia-nccl wheel, for the binaries
        d = sh(a.python, "-c", "import nvidia.nccl as m, os; print(os.path.join("
               "list(m.__path__)[0], 'lib'))")
        if d and os.path.isdir(d):
            env["CCLX_NCCL_PIP_DIR"] = d
    return env


class Mps:
    """An MPS daemon of the run's own (its pipe and log folders under the work folder) for the
    steps whose ranks share a GPU: without it the GPU time-slices between the ranks' contexts
    and every kernel that waits for a peer waits a time slice. Each rank process is limited to
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / --gpu-procs (rounded down): the rank processes
    that run at once can hold their SMs side by side, so a kernel waiting for a peer never holds
    the SMs the peer needs (src/core/sharing/mps.h). Steps under a compute-sanitizer (which does
    not attach to MPS clients) and the exclusive steps (they start their own daemon) run after
    it is stopped."""

    def __init__(self, a):
        self.dir = os.path.join(a.work, "mps")
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": os.path.join(self.dir, "pipe"),
                    "CUDA_MPS_LOG_DIRECTORY": os.path.join(self.dir, "log")}
        self.percent = max(1, 100 // max(1, a.gpu_procs))
        self.on = False

    def start(self, env: dict) -> str:
        """"" when the daemon runs; otherwise why not."""
        ctl = shutil.which("nvidia-cuda-mps-control")
        if not ctl:
            return "nvidia-cuda-mps-control is not installed"
        for d in self.env.values():
            os.makedirs(d, exist_ok=True)
        try:
            r = subprocess.run([ctl, "-d"], env=dict(env, **self.env), capture_output=True,
                               text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as e:
            return f"the MPS daemon did not start: {e}"
        if r.returncode != 0:
            return f"the MPS daemon did not start (rc {r.returncode}): {r.stdout}{r.stderr}".strip()
        self.on = True
        return ""

    def step_env(self) -> dict:
        return dict(self.env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(self.percent)) if self.on else {}

    def stop(self, env: dict) -> None:
        if not self.on:
            return
        self.on = False
        try:
            subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", env=dict(env, **self.env),
                           text=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            pass
        time.sleep(1)  # the server's exit


def command(s: dict, a) -> list:
    stem = os.path.join(a.work, s["id"].replace("/", "_").replace("@", "_"))
    s["log"] = stem + ".log"
    if s["kind"] == "gtest":
        s["report"] = stem + ".json"
        cmd = [s["path"], f"--gtest_output=json:{s['report']}"]
        if s.get("filter"):
            cmd.append(f"--gtest_filter={s['filter']}")
        if s.get("tool"):  # the ranks are forked processes: followed with --target-processes
            cmd = [a.compute_sanitizer] + s["tool_args"] + [
                "--target-processes", "all", "--error-exitcode", "99"] + cmd
    else:
        s["report"] = stem + ".xml"
        tmp = os.path.join(a.tmp, os.path.basename(stem))  # apart: pytest prunes its temp dirs
        cmd = [a.python, "-m", "pytest", "-v", "-rs", "-p", "no:cacheprovider",
               "-o", "junit_family=xunit1", f"--junitxml={s['report']}",
               f"--basetemp={tmp}"] + s["targets"]
    return ["timeout", "-k", "10", str(s["timeout"])] + cmd


def gtest_expected(s: dict, env: dict) -> list:
    cmd = [s["path"], "--gtest_list_tests"]
    if s.get("filter"):
        cmd.append(f"--gtest_filter={s['filter']}")
    try:
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return vs.gtest_list(out)


def pytest_expected(s: dict, env: dict, a) -> list:
    e = dict(env, **s["env"])
    try:
        out = subprocess.run([a.python, "-m", "pytest", "--collect-only", "-q", "-p",
                              "no:cacheprovider"] + s["targets"], env=e, capture_output=True,
                             text=True, timeout=120, cwd=ROOT).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return vs.pytest_list(out)


def sanitizer_errors(log: str) -> tuple:
    """(cclx's reports, NCCL's own reports) in a compute-sanitizer log (vs.sanitizer_reports)."""
    r = vs.sanitizer_reports(vs._read(log))
    return r["ours"], r["nccl"]


def run_steps(steps: list, a, env: dict, mps: "Mps") -> None:
    """Starts the steps in order while they fit (--jobs, --gpu-procs; a step that waited 30 s at
    the head of the queue lets none pass it), stops everything at the budget. The steps run as
    clients of `mps` while it is on; an exclusive step stops it first (it runs alone)."""
    deadline = time.time() + a.budget
    for s in steps:
        if s["state"] != "ran":
            say(f"[missing] {s['id']}: {s['reason']}")
    queue = [s for s in steps if s["state"] == "ran"]
    running, done, total = {}, 0, len(queue)
    head_since = time.time()
    while queue or running:
        now = time.time()
        if now > deadline:
            for s in running.values():
                try:
                    os.killpg(s["proc"].pid, signal.SIGKILL)
                except ProcessLookupError:  # it ended meanwhile
                    pass
                s["proc"].wait()
                s.update(rc=s["proc"].returncode, timed_out=True, seconds=round(now - s["t0"], 1),
                         reason=f"stopped: the run's time budget ({a.budget:.0f} s) was spent")
                say(f"[ budget] {s['id']}: stopped after {s['seconds']} s")
            for s in queue:
                s.update(state="not_started",
                         reason=f"the run's time budget ({a.budget:.0f} s) was spent")
            break
        used = sum(s["procs"] for s in running.values())
        excl = any(s.get("exclusive") for s in running.values())
        for i, s in enumerate(list(queue)):
            fits = (len(running) < a.jobs and used + s["procs"] <= a.gpu_procs and not excl
                    and (not s.get("exclusive") or not running)) or not running
            if fits:
                queue.remove(s)
                if s.get("exclusive"):
                    mps.stop(env)
                cmd = command(s, a)
                s.update(t0=time.time(), cmd=" ".join(cmd))
                with open(s["log"], "w") as log:  # the step's own process group: killable whole
                    s["mps"] = mps.on
                    s["proc"] = subprocess.Popen(cmd, env={**env, **mps.step_env(), **s["env"]},
                                                 stdout=log,
                                                 stderr=subprocess.STDOUT, cwd=ROOT,
                                                 start_new_session=True)
                running[s["id"]] = s
                used += s["procs"]
                excl = excl or bool(s.get("exclusive"))
                if i == 0:
                    head_since = time.time()
            elif i == 0 and time.time() - head_since > 30:
                break  # the head has waited long enough: no more steps ahead of it
        for sid, s in list(running.items()):
            p = s["proc"]
            if p.poll() is None:
                continue
            del running[sid]
            done += 1
            s.update(rc=p.returncode, timed_out=p.returncode in (124, 137),
                     seconds=round(time.time() - s["t0"], 1))
            if s.get("tool"):
                s["sanitizer_errors"], s["sanitizer_nccl_reports"] = sanitizer_errors(s["log"])
                if s["rc"] == 99 and not s["sanitizer_errors"]:
                    s["rc"] = 0  # --error-exitcode for NCCL's own reports only (kept in the step)
            c = vs.count(vs.step_cases(dict(s, expected=[])))
            say(f"[{done:3d}/{total}] {sid}: {c['passed']} passed, {c['failed'] + c['errored']} "
                f"failed, {c['skipped']} skipped, rc {p.returncode}"
                f"{' (timed out)' if s['timed_out'] else ''}, {s['seconds']} s")
        time.sleep(0.2)


def finish(steps: list, a, env: dict, meta: dict, t_start: float) -> int:
    """Lists the cases each step should have had, writes the record and the logs' archive."""
    def expect(s):
        if s["kind"] == "gtest" and s.get("path"):
            return gtest_expected(s, dict(env, **s["env"]))
        if s["kind"] == "pytest" and not (s.get("report") and os.path.isfile(s["report"])):
            return pytest_expected(s, env, a)
        return []
    with ThreadPoolExecutor(8) as ex:
        for s, names in zip(steps, ex.map(expect, steps)):
            s["expected"] = names
    manifest = {"meta": meta, "steps": [{k: v for k, v in s.items() if k not in ("proc", "t0")}
                                         for s in steps]}
    with open(os.path.join(a.work, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    rec = vs.summarize(manifest)
    rec["wall_seconds"] = round(time.time() - t_start, 1)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"{TAG}.json"), "w") as f:
        json.dump(rec, f, indent=1)
    with tarfile.open(os.path.join(a.out, f"{TAG}_logs.tar.gz"), "w:gz") as t:
        t.add(a.work, arcname=TAG)
    say(f"record {os.path.join(a.out, TAG + '.json')}, logs {TAG}_logs.tar.gz; "
        f"{rec['wall_seconds']} s in all")
    return vs.report(rec, TAG)


def main(argv=None) -> int:
    global TAG
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("VERIFY_BUILD", "build-dev/carry"))
    ap.add_argument("--out", default=os.environ.get("OUT", "bench/results"))
    ap.add_argument("--work", default=os.environ.get("VERIFY_WORK"))
    ap.add_argument("--sizes", default=os.environ.get("VERIFY_SIZES", "3 8 2 4"))
    ap.add_argument("--only", choices=("all", "cpp", "py"), default="all")
    ap.add_argument("--match", default=os.environ.get("VERIFY_MATCH"), help="regex on step ids")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("VERIFY_JOBS", "4")))
    ap.add_argument("--gpu-procs", type=int, default=int(os.environ.get("VERIFY_GPU_PROCS", "16")))
    ap.add_argument("--budget", type=float, default=float(os.environ.get("VERIFY_BUDGET", "500")))
    ap.add_argument("--time-scale", type=float,
                    default=float(os.environ.get("CCLX_TEST_TIME_SCALE", "0.4")))
    ap.add_argument("--window-rounds", type=window_rounds,
                    default=window_rounds(os.environ.get("VERIFY_WINDOW_ROUNDS", "1000")),
                    help="A[,B]: back-to-back window rounds at 2 ranks (A) and above (B)")
    ap.add_argument("--tag", default=TAG, help="names the record, its logs and the closing line")
    ap.add_argument("--gpu", default=os.environ.get("VERIFY_GPU", "0"),
                    help="CUDA_VISIBLE_DEVICES of the steps whose ranks share one GPU; 'all': "
                    "every GPU (rank r on GPU r %% count)")
    ap.add_argument("--python", default=os.environ.get("PYTHON", sys.executable))
    ap.add_argument("--list", action="store_true", help="print the plan and exit")
    ap.add_argument("--sanitize", help="JSON: run the binaries under compute-sanitizer "
                    "(scripts/gpu_sanitize.sh)")
    ap.add_argument("--compute-sanitizer", default=os.environ.get(
        "COMPUTE_SANITIZER", shutil.which("compute-sanitizer") or
        "/usr/local/cuda/bin/compute-sanitizer"))
    ap.add_argument("--mps", choices=("auto", "on", "off"),
                    default=os.environ.get("VERIFY_MPS", "auto"),
                    help="run the steps as clients of an MPS daemon of the run's own (auto: where "
                    "nvidia-cuda-mps-control is installed; never under --sanitize)")
    ap.add_argument("--step-timeout", type=int, help="seconds per step (sanitizer steps: 900)")
    ap.add_argument("--device", help="the device to record instead of asking nvidia-smi (dry runs "
                    "of the runner itself where there is no GPU)")
    a = ap.parse_args(argv)
    TAG = a.tag
    t_start = time.time()
    a.build = os.path.abspath(a.build)
    steps = plan(a)
    if a.list:
        for s in steps:
            print(f"{s['id']:40s} tier {s['tier']} ranks {s['procs']:2d} timeout {s['timeout']:3d} s"
                  f"  ~{s['expect']:.0f} s{'  (' + s['reason'] + ')' if s.get('reason') else ''}")
        print(f"{len(steps)} steps, ~{sum(s['expect'] for s in steps):.0f} s one after another")
        return 0
    devices = [a.device] if a.device else gpus()
    if not devices:
        say("SKIPPED: no NVIDIA GPU here (nvidia-smi lists none); nothing was run")
        return 0
    a.work = os.path.abspath(a.work or os.path.join(tempfile.gettempdir(), f"{TAG}_work"))
    a.out = os.path.abspath(a.out)  # (the steps run in the repository's root)
    a.tmp = a.work + "_tmp"
    for d in (a.work, a.tmp):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    env = base_env(a)
    commit = sh("git", "-C", ROOT, "rev-parse", "HEAD")
    info = {}
    if os.path.isfile(os.path.join(a.build, "BUILD_INFO.json")):
        info = json.load(open(os.path.join(a.build, "BUILD_INFO.json")))
    meta = {"commit": commit or info.get("commit", "unknown"), "built_from": info,
            "sanitize": json.loads(a.sanitize) if a.sanitize else None,
            "not_run": getattr(a, "not_run", []),
            "device": devices[0], "gpus": devices, "sizes": a.sizes, "time_scale": a.time_scale,
            "jobs": a.jobs, "gpu_procs": a.gpu_procs, "budget_s": a.budget,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t_start))}
    say(f"{len(steps)} steps on {devices[0]} (x{len(devices)}), world sizes {a.sizes}, "
        f"CCLX_TEST_TIME_SCALE={a.time_scale}, {a.jobs} steps / {a.gpu_procs} ranks at once, "
        f"budget {a.budget:.0f} s; build {a.build}")
    for line in getattr(a, "not_run", []):
        say(f"[not run] {line}")
    mps = Mps(a)
    if a.mps != "off" and not a.sanitize:
        why = mps.start(env)
        if why and a.mps == "on":
            say(f"MPS: {why}; stopping (VERIFY_MPS=auto runs time-sliced instead)")
            return 2
        say(f"MPS daemon on, {mps.percent}% of the SMs a rank process" if mps.on else
            f"no MPS ({why}): the ranks time-slice the GPU")
    meta["mps"] = {"on": mps.on, "thread_percent": mps.percent if mps.on else None}
    try:
        run_steps(steps, a, env, mps)
    finally:
        mps.stop(env)
    return finish(steps, a, env, meta, t_start)


if __name__ == "__main__":
    sys.exit(main())
