"""bench/verify_summary.py, the summarizer of scripts/gpu_verify.py and scripts/gpu_sanitize.sh:
GoogleTest JSON and pytest JUnit XML samples, a binary that crashed (no JSON: its log and its
list of cases), one stopped at its timeout, one never started, skips with their reasons, a clean
exit code with a failure and a bad one without; then the runner itself on fake binaries (no GPU),
and the GPU scripts' visible skip where there is no GPU; bench/torchcomms_suite.py's file
selection (--files, --shard)."""
import json
import os
import shutil
import subprocess
import sys

import harness
import pytest

sys.path.insert(0, os.path.join(harness.ROOT, "bench"))
import verify_summary as vs  # noqa: E402

LIST = """Running main() from gtest_main.cc
GpuX.
  Pass
  Fail
  Skip
GpuY.
  Crash
  After
I/P.
  Q/0  # GetParam() = 1
"""
CASES = ["GpuX.Pass", "GpuX.Fail", "GpuX.Skip", "GpuY.Crash", "GpuY.After", "I/P.Q/0"]


def gtest_json(path, failed=("GpuX.Fail",), skipped=("GpuX.Skip",)):
    suites = {}
    for c in CASES:
        s, n = c.rsplit(".", 1)
        t = {"name": n, "status": "RUN", "result": "SKIPPED" if c in skipped else "COMPLETED",
             "time": "1.5s", "classname": s}
        if c in failed:
            t["failures"] = [{"failure": "t.cc:4\nExpected equality", "type": ""}]
        suites.setdefault(s, []).append(t)
    rep = {"tests": len(CASES), "testsuites": [{"name": s, "testsuite": v} for s, v in suites.items()]}
    path.write_text(json.dumps(rep))
    return str(path)


LOG_OK = """[ RUN      ] GpuX.Pass
[       OK ] GpuX.Pass (10 ms)
[ RUN      ] GpuX.Fail
t.cc:4: Failure
[  FAILED  ] GpuX.Fail (3 ms)
[ RUN      ] GpuX.Skip
t.cc:9: Skipped
needs 1 CUDA GPU(s), found 0
[  SKIPPED ] GpuX.Skip (0 ms)
"""
LOG_CRASH = LOG_OK + "[ RUN      ] GpuY.Crash\n[rank 1] rank 1: exception\n"


def step(**kw):
    s = {"id": "cpp/t@3", "kind": "gtest", "name": "t", "world_size": 3, "state": "ran", "rc": 0,
         "timed_out": False, "seconds": 4.0, "expected": CASES}
    s.update(kw)
    return s


def by_name(cases):
    return {c["name"]: c for c in cases}


def test_gtest_list_reads_suites_and_parameters():
    assert vs.gtest_list(LIST) == CASES


def test_report_gives_every_verdict_and_the_skip_reason(tmp_path):
    (tmp_path / "t.log").write_text(LOG_OK)
    cases = vs.step_cases(step(rc=1, report=gtest_json(tmp_path / "t.json"),
                               log=str(tmp_path / "t.log")))
    c = by_name(cases)
    assert vs.count(cases) == {"passed": 4, "failed": 1, "skipped": 1, "errored": 0}
    assert c["GpuX.Skip"]["reason"] == "needs 1 CUDA GPU(s), found 0"
    assert c["GpuX.Fail"]["reason"].startswith("t.cc:4") and c["GpuX.Pass"]["seconds"] == 1.5
    assert all(x["world_size"] == 3 for x in cases)


def test_crashed_binary_counts_unreported_cases_as_errored(tmp_path):
    (tmp_path / "t.log").write_text(LOG_CRASH)
    cases = vs.step_cases(step(rc=134, report=str(tmp_path / "none.json"),
                               log=str(tmp_path / "t.log")))
    c = by_name(cases)
    assert vs.count(cases) == {"passed": 1, "failed": 1, "skipped": 1, "errored": 3}
    assert "started and never finished" in c["GpuY.Crash"]["reason"]
    assert "134" in c["GpuY.Crash"]["reason"] and "134" in c["GpuY.After"]["reason"]
    assert c["GpuX.Skip"]["reason"] == "needs 1 CUDA GPU(s), found 0"


def test_timed_out_and_never_started_steps(tmp_path):
    (tmp_path / "t.log").write_text(LOG_CRASH)
    timed = by_name(vs.step_cases(step(rc=124, timed_out=True, timeout=150,
                                       log=str(tmp_path / "t.log"))))
    assert "timeout" in timed["GpuY.Crash"]["reason"]
    assert "150 s" in timed["I/P.Q/0"]["reason"] and timed["I/P.Q/0"]["status"] == "errored"
    never = vs.step_cases(step(state="not_started", rc=None, reason="the budget was spent"))
    assert vs.count(never)["errored"] == len(CASES)
    assert all("never started: the budget was spent" == x["reason"] for x in never)
    missing = vs.step_cases(step(state="missing", rc=None, expected=[], reason="not built"))
    assert [(x["name"], x["status"]) for x in missing] == [("(step)", "errored")]


def test_exit_code_without_a_failed_case_is_an_error(tmp_path):
    rep = gtest_json(tmp_path / "t.json", failed=())
    cases = vs.step_cases(step(rc=1, report=rep))
    assert vs.count(cases) == {"passed": 5, "failed": 0, "skipped": 1, "errored": 1}
    assert by_name(cases)["(exit code)"]["reason"] == "exit code 1 although no case failed"
    assert vs.count(vs.step_cases(step(rc=0, report=rep)))["errored"] == 0
    san = vs.step_cases(step(rc=0, report=rep, sanitizer_errors=2))
    assert by_name(san)["(sanitizer)"]["status"] == "failed"


JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.gpu.api.test_gpu_memory" name="test_gpu_memory[shared3-a]" time="5.1">
<properties><property name="world_size" value="3"/></properties></testcase>
<testcase classname="tests.gpu.api.test_gpu_memory" name="test_gpu_memory[shared3-b]" time="0.1">
<properties><property name="world_size" value="3"/><property name="case_seconds" value="2.25"/>
</properties>
<failure message="case b failed">trace</failure></testcase>
<testcase classname="tests.gpu.api.test_gpu_memory" name="test_gpu_memory[shared3-c]" time="0">
<skipped type="pytest.skip" message="needs torchcomms">t.py:3: needs torchcomms</skipped></testcase>
<testcase classname="tests.gpu.failure.test_gpu_failure" name="test_gpu_killed_rank[raise-4]" time="9">
<error message="fixture failed">trace</error></testcase>
<testcase classname="" name="tests.gpu.api.test_gpu_example" time="0.000">
<skipped message="collection skipped">('/x/gpu_env.py', 39, 'Skipped: needs 2 CUDA GPUs, found 1')</skipped>
</testcase></testsuite></testsuites>"""
NODES = ["tests/gpu/api/test_gpu_memory.py::test_gpu_memory[shared3-a]",
         "tests/gpu/api/test_gpu_memory.py::test_gpu_memory[shared3-b]",
         "tests/gpu/api/test_gpu_memory.py::test_gpu_memory[shared3-c]",
         "tests/gpu/api/test_gpu_memory.py::test_gpu_memory[shared3-d]"]


def test_junit_cases_properties_and_unreported_ones(tmp_path):
    (tmp_path / "r.xml").write_text(JUNIT)
    s = step(id="py/api@3", kind="pytest", report=str(tmp_path / "r.xml"), rc=1, expected=NODES)
    cases = vs.step_cases(s)
    c = by_name(cases)
    assert vs.count(cases) == {"passed": 1, "failed": 1, "skipped": 2, "errored": 2}
    assert c["tests.gpu.api.test_gpu_example"]["reason"] == "needs 2 CUDA GPUs, found 1"
    a = c["tests.gpu.api.test_gpu_memory::test_gpu_memory[shared3-a]"]
    assert a["world_size"] == 3 and a["seconds"] == 5.1
    assert c["tests.gpu.api.test_gpu_memory::test_gpu_memory[shared3-b]"]["seconds"] == 2.25
    assert c["tests.gpu.api.test_gpu_memory::test_gpu_memory[shared3-c]"]["reason"] == \
        "needs torchcomms"
    assert "[shared3-d]" in [x["name"] for x in cases if x["status"] == "errored"][-1]


def test_pytest_stopped_before_its_junit_file_uses_the_log(tmp_path):
    (tmp_path / "p.log").write_text(
        f"{NODES[0]} PASSED [ 25%]\n{NODES[1]} FAILED [ 50%]\n{NODES[2]} SKIPPED (x) [ 75%]\n")
    s = step(id="py/api@3", kind="pytest", report=str(tmp_path / "none.xml"),
             log=str(tmp_path / "p.log"), rc=124, timed_out=True, timeout=300, expected=NODES)
    cases = vs.step_cases(s)
    assert vs.count(cases) == {"passed": 1, "failed": 1, "skipped": 1, "errored": 1}
    assert "timeout (300 s)" in [x for x in cases if x["status"] == "errored"][0]["reason"]
    assert vs.pytest_list("\n".join(NODES) + "\n\n4 tests collected in 0.1s\n") == NODES


def test_record_and_closing_line(tmp_path, capsys):
    (tmp_path / "t.log").write_text(LOG_OK)
    manifest = {"meta": {"commit": "abc", "device": "NVIDIA H100"}, "steps": [
        step(id="a", rc=1, report=gtest_json(tmp_path / "a.json"), log=str(tmp_path / "t.log")),
        step(id="b", state="not_started", rc=None, expected=CASES[:2])]}
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    rc = vs.main([str(tmp_path / "m.json"), str(tmp_path / "out.json"), "--tag", "gpu_verify"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 1
    assert out[-1] == "gpu_verify: 4 passed, 3 failed, 1 skipped"
    rec = json.loads((tmp_path / "out.json").read_text())
    assert rec["commit"] == "abc" and rec["totals"]["errored"] == 2
    assert [s["id"] for s in rec["steps"]] == ["a", "b"] and rec["steps"][1]["errored"] == 2
    clean = {"steps": [step(id="c", report=gtest_json(tmp_path / "c.json", failed=()))]}
    assert vs.report(vs.summarize(clean), "x", out=open(os.devnull, "w")) == 0


FAKE = r"""#!/bin/sh
# a GoogleTest binary: passes at 2 ranks, crashes at 3, hangs at 4
for a in "$@"; do
  case "$a" in
  --gtest_list_tests) printf 'GpuF.\n  One\n  Two\n'; exit 0 ;;
  --gtest_output=json:*) out=${a#--gtest_output=json:} ;;
  esac
done
echo "[ RUN      ] GpuF.One"
case "$CCLX_TEST_RANKS" in
3) kill -ABRT $$ ;;
4) sleep 100 ;;
esac
echo "[       OK ] GpuF.One (1 ms)"
echo "[ RUN      ] GpuF.Two"
echo "[       OK ] GpuF.Two (1 ms)"
printf '{"testsuites": [{"name": "GpuF", "testsuite": [{"name": "One", "result": "COMPLETED"},
 {"name": "Two", "result": "COMPLETED"}]}]}' > "$out"
"""


def test_runner_on_fake_binaries(tmp_path):
    build = tmp_path / "build"
    (build / "tests").mkdir(parents=True)
    for name in ("test_gpu_shared", "test_gpu_dtype_guard"):
        (build / "tests" / name).write_text(FAKE)
        (build / "tests" / name).chmod(0o755)
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(harness.ROOT, "scripts", "gpu_verify.py"), "--device",
           "fake", "--build", str(build), "--out", str(out), "--work", str(tmp_path / "w"),
           "--only", "cpp", "--sizes", "2 3 4", "--budget", "4", "--jobs", "1",
           "--match", r"^cpp/test_gpu_(shared@|dtype_guard$)"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=harness.ROOT)
    assert r.returncode == 1, r.stdout + r.stderr
    rec = json.loads((out / "gpu_verify.json").read_text())
    st = {s["id"]: s for s in rec["steps"]}
    assert st["cpp/test_gpu_dtype_guard"]["passed"] == 2 and st["cpp/test_gpu_shared@2"]["passed"] == 2
    assert st["cpp/test_gpu_shared@3"]["errored"] == 2 and st["cpp/test_gpu_shared@3"]["rc"] != 0
    assert st["cpp/test_gpu_shared@4"]["timed_out"] and st["cpp/test_gpu_shared@4"]["errored"] == 2
    assert r.stdout.splitlines()[-1] == "gpu_verify: 4 passed, 4 failed, 0 skipped", r.stdout
    assert (out / "gpu_verify_logs.tar.gz").is_file() and rec["device"] == "fake"


MPS_CTL = r"""#!/bin/sh
# nvidia-cuda-mps-control: records how it was called (-d starts, "quit" on stdin stops)
if [ "$1" = "-d" ]; then echo "start $CUDA_MPS_PIPE_DIRECTORY" >> "$MPS_LOG"; exit 0; fi
read cmd; echo "$cmd $CUDA_MPS_PIPE_DIRECTORY" >> "$MPS_LOG"
"""


def _run_fake(tmp_path, env, names, sizes, match, text=FAKE):
    build = tmp_path / "build"
    (build / "tests").mkdir(parents=True, exist_ok=True)
    for name in names:
        (build / "tests" / name).write_text(text)
        (build / "tests" / name).chmod(0o755)
    out = tmp_path / "out"
    cmd = [sys.executable, os.path.join(harness.ROOT, "scripts", "gpu_verify.py"), "--device",
           "fake", "--build", str(build), "--out", str(out), "--work", str(tmp_path / "w"),
           "--only", "cpp", "--sizes", sizes, "--budget", "20", "--jobs", "2", "--gpu-procs", "8",
           "--match", match]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=harness.ROOT, env=env)
    return r, json.loads((out / "gpu_verify.json").read_text())


def test_runner_runs_the_ranks_under_its_own_mps_daemon(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-cuda-mps-control").write_text(MPS_CTL)
    (bin_dir / "nvidia-cuda-mps-control").chmod(0o755)
    log = tmp_path / "mps.log"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", MPS_LOG=str(log))
    client = FAKE.replace('echo "[ RUN      ] GpuF.One"', 'echo "client $CUDA_MPS_PIPE_DIRECTORY '
                          '$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" >> "$MPS_LOG"\necho "[ RUN      ] GpuF.One"')
    r, rec = _run_fake(tmp_path, env, ["test_gpu_shared"], "2", r"^cpp/test_gpu_shared@2$", client)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "MPS daemon on, 12% of the SMs a rank process" in r.stdout, r.stdout
    assert rec["mps"] == {"on": True, "thread_percent": 12}
    assert rec["steps"][0]["passed"] == 2
    # Started, the step a client of that daemon limited to its share of the SMs, stopped.
    pipe = str(tmp_path / "w" / "mps" / "pipe")
    assert log.read_text().splitlines() == [f"start {pipe}", f"client {pipe} 12", f"quit {pipe}"]
    # Without the control program: time-sliced, said so.
    env = dict(os.environ, PATH="/usr/bin:/bin")
    r, rec = _run_fake(tmp_path / "b", env, ["test_gpu_shared"], "2", r"^cpp/test_gpu_shared@2$")
    assert "no MPS (nvidia-cuda-mps-control is not installed)" in r.stdout, r.stdout
    assert rec["mps"] == {"on": False, "thread_percent": None}


def test_torchcomms_device_binary_runs_per_world_size_or_is_listed_as_not_built(tmp_path):
    name = "test_gpu_devapi_torchcomms"
    r, rec = _run_fake(tmp_path / "a", dict(os.environ, VERIFY_MPS="off"), [name], "2",
                       r"^cpp/test_gpu_devapi")
    assert [s["id"] for s in rec["steps"]] == [f"cpp/{name}@2"], rec["steps"]
    r, rec = _run_fake(tmp_path / "b", dict(os.environ, VERIFY_MPS="off"), ["test_gpu_shared"],
                       "2", r"^cpp/test_gpu_devapi")
    assert rec["steps"] == [] and any(name in line and "not built" in line
                                      for line in rec["not_run"]), rec["not_run"]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="a GPU driver is installed here")
def test_gpu_scripts_say_they_skip_without_a_gpu():
    for script, args in (("gpu_verify.sh", ["run"]), ("gpu_sanitize.sh", [])):
        r = subprocess.run(["bash", os.path.join(harness.ROOT, "scripts", script)] + args,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "SKIPPED: no NVIDIA GPU" in r.stdout, r.stdout + r.stderr


def test_gpu_world_sizes_come_from_the_environment(monkeypatch):
    sys.path.insert(0, os.path.join(harness.ROOT, "tests", "gpu"))
    import gpu_env

    monkeypatch.delenv("CCLX_TEST_RANKS", raising=False)
    assert gpu_env.world_sizes((1, 2, 3)) == [1, 2, 3]
    gpu_env.require_world_size(3)  # runs: no list given
    monkeypatch.setenv("CCLX_TEST_RANKS", "8,2 3")
    assert gpu_env.world_sizes((1, 2, 3)) == [2, 3, 8]
    gpu_env.require_world_size(8)
    with pytest.raises(pytest.skip.Exception, match="runs at 4 ranks only"):
        gpu_env.require_world_size(4)


def test_torchcomms_suite_selects_files_and_shards():
    """bench/torchcomms_suite.py's file selection: *Test.py sorted, a name list, and --shard I/N
    (interleaved parts that together are every file once; a bad shard is refused)."""
    import torchcomms_suite as ts

    names = ["BTest.py", "ATest.py", "helpers.py", "DTest.py", "CTest.py", "ETest.py"]
    every = ts.select_files(names)
    assert every == ["ATest.py", "BTest.py", "CTest.py", "DTest.py", "ETest.py"]
    parts = [ts.select_files(names, shard=f"{i}/3") for i in (1, 2, 3)]
    assert parts == [["ATest.py", "DTest.py"], ["BTest.py", "ETest.py"], ["CTest.py"]]
    assert sorted(f for p in parts for f in p) == every
    assert ts.select_files(names, "ETest.py, CTest.py", "2/2") == ["ETest.py"]
    for bad in ("0/2", "3/2", "1", "a/b"):
        with pytest.raises(ValueError, match="--shard"):
            ts.select_files(names, shard=bad)


SAN_LOG = """========= COMPUTE-SANITIZER
[ RUN      ] GpuNccl.X
========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image is available for execution on the device" on CUDA API call to cudaFuncGetAttributes.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: ncclInitKernelsForDevice(int, int, unsigned long*) in enqueue.cc:52 [0x6d9d3] in libnccl.so.2
=========         Host Frame: cclx::ncclCreateComm(...) [0x120959] in libcclx.so.0
=========
========= Uninitialized __global__ memory read of size 8 bytes
=========     at cclx::k()+0x620
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x39fb94] in libcuda.so.1
=========         Host Frame:  [0x14e313] in libcclx.so.0
=========
========= LEAK SUMMARY: 0 bytes leaked in 0 allocations
========= ERROR SUMMARY: 5 errors
========= ERROR SUMMARY: 3 errors were not printed. Use --print-limit option to adjust the number of printed errors
"""


def test_sanitizer_reports_keep_nccls_own_apart_and_count_the_unprinted():
    # One NCCL probe (its first host frame in libnccl), one report of ours, 3 beyond the print
    # limit (ours: nothing shows otherwise); banners and summaries are no reports.
    assert vs.sanitizer_reports(SAN_LOG) == {"ours": 4, "nccl": 1}
    assert vs.sanitizer_reports("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
                                "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 "
                                "warnings)\n") == {"ours": 0, "nccl": 0}
    # A summary without printed reports (--print-limit 0): all ours.
    assert vs.sanitizer_reports("========= ERROR SUMMARY: 2 errors\n") == {"ours": 2, "nccl": 0}
    step_ = step(rc=0, sanitizer_errors=4, sanitizer_nccl_reports=1)
    assert any(c["name"] == "(sanitizer)" and c["status"] == "failed"
               for c in vs.step_cases(step_))
