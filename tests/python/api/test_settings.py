"""The table of settings and hints seen from Python: cclx._C.hint_keys() is the set of keys the
C++ hint check accepts, and docs/SETTINGS.md lists each of them."""
import os
import re

import numpy as np
import pytest

import cclx
import harness
from cclx import _C


@pytest.fixture(scope="module")
def comm():
    keep = {k: os.environ.pop(k) for k in ("RANK", "WORLD_SIZE", "TORCHCOMM_RANK",
                                          "TORCHCOMM_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                          "LOCAL_RANK") if k in os.environ}
    c = cclx.new_comm("cclx", "cpu", name="settings", timeout=30)
    yield c
    c.finalize()
    os.environ.update(keep)


def _rejected(comm, hints):
    with pytest.raises(cclx.CclxInvalidArgument) as e:
        comm.get_algo(8, cclx.DataType.f32, hints=hints)
    return str(e.value)


def test_hint_keys_are_what_the_check_accepts(comm):
    keys = _C.hint_keys()
    assert keys and len(set(keys)) == len(keys) and "algo" in keys, keys
    # An unknown key names exactly these keys, in this order.
    msg = _rejected(comm, {"no_such_hint": "1"})
    assert msg == f"unknown hint 'no_such_hint' (valid hints: {', '.join(keys)})", msg
    x = np.ones(4, np.float32)
    for k in keys:
        # A known key: the value is what is wrong, and the message names the valid values.
        msg = _rejected(comm, {k: "bogus"})
        m = re.fullmatch(rf"hint {k}='bogus' is not one of (.*)", msg)
        assert m, msg
        values = m.group(1).split(", ")
        for v in values:  # each of them passes the check (as a call's and as a comm's hint)
            comm.get_algo(8, cclx.DataType.f32, hints={k: v})
            comm.all_reduce(x, hints={k: v}).wait()


def test_settings_doc_lists_every_hint_key():
    with open(os.path.join(harness.ROOT, "docs", "SETTINGS.md")) as f:
        doc = f.read()
    for k in _C.hint_keys():
        assert f"| `{k}` |" in doc, k


def test_hint_values_are_what_the_check_accepts(comm):
    for k in _C.hint_keys():
        values = _C.hint_values(k)
        assert _rejected(comm, {k: "bogus"}) == f"hint {k}='bogus' is not one of {', '.join(values)}"
    with pytest.raises(cclx.CclxInvalidArgument, match="valid hints: algo"):
        _C.hint_values("no_such_hint")


def test_perf_tool_offers_the_hint_values():
    from cclx.perf.cli import build_parser

    opts = {a.dest: a for a in build_parser()._actions}
    for dest, key in (("algo", "algo"), ("fp8_algo", "fp8_algo"), ("fused_algo", "fused_algo"),
                      ("put_path", "put_path")):
        assert list(opts[dest].choices) == _C.hint_values(key), dest
