"""cclx as a torchcomms backend (torchcomms.new_comm("cclx")) on 3 CPU processes; skipped when
torchcomms is not installed. torchcomms' own integration suite runs through
bench/torchcomms_suite.py (docs/API.md, "From torchcomms")."""
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchcomms")

import harness  # noqa: E402

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tc_cases",
                     "cases_torchcomms.py")
EXT_CASES = os.path.join(os.path.dirname(CASES), "cases_torchcomms_ext.py")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    # The Python route (CclxBackend); test_torchcomms_cxx.py runs the C++ one.
    env = harness.torchcomms_entry_point(str(tmp_path_factory.mktemp("tc_entry")))
    env.update(CCLX_ABORT_ON_ERROR="0", CCLX_TORCHCOMMS_ROUTE="python")
    return harness.run(CASES, 3, env=env)


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_torchcomms_backend(results, case):
    harness.check(results, case)


@pytest.fixture(scope="module")
def ext_results(tmp_path_factory):
    env = harness.torchcomms_entry_point(str(tmp_path_factory.mktemp("tc_entry_ext")))
    env.update(CCLX_ABORT_ON_ERROR="0", CCLX_TORCHCOMMS_ROUTE="python")
    return harness.run(EXT_CASES, 3, env=env)


@pytest.mark.parametrize("case", harness.case_names(EXT_CASES))
def test_torchcomms_backend_ext(ext_results, case):
    """comm_dump, the persistent all-gather, NCCLX's extra methods and the profiler events."""
    harness.check(ext_results, case)


def test_entry_point_declared():
    """pip install . declares the entry point torchcomms looks the backend up by."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    text = open(os.path.join(root, "pyproject.toml")).read()
    assert '[project.entry-points."torchcomms.backends"]' in text
    assert 'cclx = "cclx.torchcomms_backend"' in text
