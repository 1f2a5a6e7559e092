"""cclx as a C++ torchcomms backend (libcclx_torchcomms.so, src/torchcomms) on 3 CPU processes:
torchcomms.new_comm("cclx") through torchcomms' dynamic-loader route. Skipped, saying why, when
torchcomms is not installed or the library was not built (it needs torchcomms' headers:
CCLX_TORCHCOMMS_SRC, docs/DESIGN.md "torchcomms backend")."""
import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchcomms")

import harness  # noqa: E402

import cclx  # noqa: E402

CASES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                     "cases_torchcomms_cxx.py")
LIB = os.path.join(os.path.dirname(os.path.abspath(cclx._C.__file__)), "libcclx_torchcomms.so")


def _entry_point_dir(tmp):
    """A distribution that declares only the entry point torchcomms finds backends by, for a
    cclx that runs from the build tree (pip install . declares it for an installed one)."""
    d = os.path.join(tmp, "cclx_tc_entry-0.0.dist-info")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: cclx-tc-entry\nVersion: 0.0\n")
    with open(os.path.join(d, "entry_points.txt"), "w") as f:
        f.write("[torchcomms.backends]\ncclx = cclx.torchcomms_backend\n")
    return tmp


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    if not os.path.isfile(LIB):
        pytest.skip(f"{LIB} was not built (configure with CCLX_TORCHCOMMS_SRC=<torchcomms "
                    f"source tree>)")
    ep = _entry_point_dir(str(tmp_path_factory.mktemp("tc_entry")))
    path = os.pathsep.join(p for p in (os.path.join(harness.ROOT, "python"), ep,
                                       os.environ.get("PYTHONPATH", "")) if p)
    return harness.run(CASES, 3, env={"CCLX_ABORT_ON_ERROR": "0", "CCLX_TORCHCOMMS_ROUTE": "cxx",
                                      "PYTHONPATH": path})


@pytest.mark.parametrize("case", harness.case_names(CASES))
def test_torchcomms_cxx(results, case):
    harness.check(results, case)
