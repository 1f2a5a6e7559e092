"""pytest plugin that bench/torchcomms_suite.py loads into every rank of torchcomms' integration
suite (`-p tc_suite_plugin`, bench/tc_suite/ on PYTHONPATH). It never edits torchcomms' files.

Per-test results (always): each rank appends one JSON line per test report to
$CCLX_SUITE_REPORT_DIR/rank<RANK>.jsonl as it happens (a rank that crashes or is killed still
leaves what it ran, and the test it had started): {"id", "event": "start" | "report" |
"collect", "when", "outcome", "reason"} where reason is a skip's reason or the first line of a
failure's exception.

Name gates (when $CCLX_SUITE_LET_THROUGH names a backend, e.g. ncclx): torchcomms' tests gate
whole tests on the backend's name. The plugin evaluates those gates as for that backend and runs
the tests on the backend under test ($TEST_BACKEND) all the same. Gate kinds handled:

1. import-time decorators on a test or class that read TEST_BACKEND
   (`skipIf(os.getenv("TEST_BACKEND") != "ncclx")`, `not in [...]`, the `skip_unless_ncclx`
   helpers of cuda_graph_test_helpers.py and BroadcastTest.py, the module-level skip of
   LazySetupChannelsTest.py, WindowRmaTest.py's and CudaGraphsWindowTest.py's
   `_should_skip_rma_test()` (ncclx there also needs NCCL_CTRAN_ENABLE, and AllGatherPTest.py's
   decorator asks for it too): each test module is imported with TEST_BACKEND=<gate name> and
   NCCL_CTRAN_ENABLE=true (when unset), both restored right after the import;
2. the inverse gate `skip_if_ncclx` (tests/helpers/py/test_helpers.py, which skips for ncclx what
   other backends run) is undone after the import: a class or test skipped with its reason runs
   (nothing is imported before pytest imports the test module, which may set variables such as
   TORCHCOMMS_PATCH_FOR_COMPILE that torchcomms reads at its own import);
3. class lists `SUPPORTED_BACKENDS` (GetInitHandleTest, ReconfigureTest, WaitBlockingTest):
   the backend under test is added to each test class's list after import;
4. runtime checks inside one method, listed in RUNTIME_GATES below (MonitoredBarrierTest's setUp
   runs only for gloo; AllToAllTest.test_all_tests runs its CUDA graph part only for ncclx): the
   method runs with TEST_BACKEND set to the name it asks for (the graph part only where
   TEST_DEVICE is not cpu: on CPU it would only find that there is no GPU).

Left gated: NCCL_GIN_ENABLE (CudaGraphsWindowTest's device-side windows), LazyP2PTest (nccl
only, not a name gate of ncclx), `skip_backend("ncclx")` (a runtime skip for ncclx, which the
backend under test does not hit).
"""
from __future__ import annotations

import functools
import json
import os

import pytest

_REPORT_DIR = os.environ.get("CCLX_SUITE_REPORT_DIR", "")
_GATE = os.environ.get("CCLX_SUITE_LET_THROUGH", "")
_RANK = os.environ.get("RANK", "0")

# (file, class, method) -> the TEST_BACKEND the method reads; "cuda only": not on TEST_DEVICE=cpu
RUNTIME_GATES = {
    ("MonitoredBarrierTest.py", "MonitoredBarrierTest", "setUp"): ("gloo", False),
    ("AllToAllTest.py", "AllToAllTest", "test_all_tests"): ("ncclx", True),
}
# skip reasons of inverse gates (a skip FOR the gate's name): tests/helpers/py/test_helpers.py's
# skip_if_ncclx
INVERSE_GATE_REASONS = ("Skipping tests for NCCLX backend.",)

_fh = None


def _emit(rec: dict) -> None:
    global _fh
    if not _REPORT_DIR:
        return
    if _fh is None:
        os.makedirs(_REPORT_DIR, exist_ok=True)
        _fh = open(os.path.join(_REPORT_DIR, f"rank{_RANK}.jsonl"), "a", buffering=1)
    _fh.write(json.dumps(rec) + "\n")
    _fh.flush()


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()[:300]
    return ""


def _swap_env(values: dict) -> dict:
    old = {k: os.environ.get(k) for k in values}
    for k, v in values.items():
        os.environ[k] = v
    return old


def _restore_env(old: dict) -> None:
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    if not _GATE or not isinstance(collector, pytest.Module):
        yield
        return
    real = os.environ.get("TEST_BACKEND", "")
    values = {"TEST_BACKEND": _GATE}
    if "NCCL_CTRAN_ENABLE" not in os.environ:
        values["NCCL_CTRAN_ENABLE"] = "true"
    old = _swap_env(values)
    try:
        outcome = yield
    finally:
        _restore_env(old)
    mod = getattr(collector, "_obj", None)
    if mod is None or outcome.excinfo is not None:
        return
    _undo_inverse(mod)
    _open_lists(mod, real)
    _wrap_runtime(mod, os.path.basename(str(collector.path)))


def _undo_inverse(mod) -> None:
    """Kind 2: what the gate's name is skipped for runs for the backend under test."""
    def undo(obj) -> None:
        if getattr(obj, "__unittest_skip_why__", None) in INVERSE_GATE_REASONS:
            obj.__unittest_skip__ = False

    for obj in vars(mod).values():
        if isinstance(obj, type):
            undo(obj)
            for name, meth in vars(obj).items():
                if name.startswith("test"):
                    undo(meth)


def _open_lists(mod, real: str) -> None:
    """Kind 3: the backend under test joins every test class's SUPPORTED_BACKENDS."""
    for obj in vars(mod).values():
        if not isinstance(obj, type):
            continue
        lst = obj.__dict__.get("SUPPORTED_BACKENDS")
        if isinstance(lst, set):
            lst.add(real)
        elif isinstance(lst, list):
            lst.append(real)
        elif isinstance(lst, (tuple, frozenset)):
            obj.SUPPORTED_BACKENDS = type(lst)(list(lst) + [real])


def _wrap_runtime(mod, fname: str) -> None:
    """Kind 4: the listed methods read the name they ask for while they run."""
    on_cpu = os.environ.get("TEST_DEVICE", "cuda") == "cpu"
    for (f, cls_name, meth), (name, cuda_only) in RUNTIME_GATES.items():
        cls = getattr(mod, cls_name, None)
        if f != fname or cls is None or (cuda_only and on_cpu):
            continue
        orig = getattr(cls, meth)

        def wrapped(self, *a, _orig=orig, _name=name, **k):
            old = _swap_env({"TEST_BACKEND": _name})
            try:
                return _orig(self, *a, **k)
            finally:
                _restore_env(old)

        setattr(cls, meth, functools.wraps(orig)(wrapped))


def pytest_runtest_logstart(nodeid, location) -> None:
    _emit({"id": nodeid, "event": "start"})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
        try:
            rep.cclx_first_line = _first_line(call.excinfo.exconly())
        except Exception:  # noqa: BLE001
            pass


def _reason(report) -> str:
    if report.skipped:
        lr = report.longrepr
        if isinstance(lr, tuple) and len(lr) == 3:
            r = str(lr[2])
            return r[len("Skipped: "):] if r.startswith("Skipped: ") else r
        return _first_line(str(lr))
    if report.failed:
        return getattr(report, "cclx_first_line", "") or _first_line(
            getattr(report, "longreprtext", "") or str(report.longrepr))
    return ""


def pytest_runtest_logreport(report) -> None:
    rec = {"id": report.nodeid, "event": "report", "when": report.when,
           "outcome": report.outcome, "reason": _reason(report)}
    ctx = getattr(report, "context", None)  # a unittest subTest (pytest's subtests)
    if ctx is not None:
        rec["subtest"] = str(getattr(ctx, "msg", "") or getattr(ctx, "kwargs", ""))
    _emit(rec)


def pytest_collectreport(report) -> None:
    if report.failed:
        _emit({"id": report.nodeid, "event": "collect", "outcome": "failed",
               "reason": _first_line(getattr(report, "longreprtext", "") or
                                     str(report.longrepr))})


def pytest_sessionfinish(session, exitstatus) -> None:
    _emit({"id": "", "event": "end", "exitstatus": int(exitstatus)})
    if _fh is not None:
        _fh.close()

