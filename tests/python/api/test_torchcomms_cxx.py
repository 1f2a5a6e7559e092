"""cclx as a C++ torchcomms backend (libcclx_torchcomms.so, src/torchcomms) on 3 CPU processes:
torchcomms.new_comm("cclx") through torchcomms' dynamic-loader route. Skipped, saying why, when
torchcomms is not installed or the library was not built (it needs torchcomms' headers:
CCLX_TORCHCOMMS_SRC, docs/design/torchcomms.md)."""
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchcomms")

import harness  # noqa: E402

import cclx  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = os.path.join(HERE, "tc_cases", "cases_torchcomms_cxx.py")
WINDOW_CASES = os.path.join(HERE, "tc_cases", "cases_torchcomms_cxx_window.py")
EXT_CASES = os.path.join(HERE, "tc_cases", "cases_torchcomms_ext.py")
LIB = os.path.join(os.path.dirname(os.path.abspath(cclx._C.__file__)), "libcclx_torchcomms.so")


def _run(cases, tmp_path_factory):
    if not os.path.isfile(LIB):
        pytest.skip(f"{LIB} was not built (configure with CCLX_TORCHCOMMS_SRC=<torchcomms "
                    f"source tree>)")
    env = harness.torchcomms_entry_point(str(tmp_path_factory.mktemp("tc_entry")))
    env.update(CCLX_ABORT_ON_ERROR="0", CCLX_TORCHCOMMS_ROUTE="cxx")
    return harness.run(cases, 3, env=env)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _run(CASES, tmp_path_factory)


@pytest.fixture(scope="module")
def window_results(tmp_path_factory):
    return _run(WINDOW_CASES, tmp_path_factory)


@pytest.fixture(scope="module")
def ext_results(tmp_path_factory):
    return _run(EXT_CASES, tmp_path_factory)


@pytest.mark.parametrize("case", harness.case_names(EXT_CASES))
def test_torchcomms_cxx_ext(ext_results, case):
    """comm_dump, the persistent all-gather, NCCLX's extra methods and the profiler events."""
    harness.check(ext_results, case)


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_torchcomms_cxx(results, case):
    harness.check(results, case)


@pytest.mark.parametrize("case", harness.case_names(WINDOW_CASES))
def test_torchcomms_cxx_window(window_results, case):
    harness.check(window_results, case)
