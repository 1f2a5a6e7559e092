"""cclx_c10d (python/cclx_c10d), torch.distributed's backend "cclx". Its device list: torch makes
one comm, on the first device listed, for a backend that names itself for every device, so "cuda"
comes first where a GPU may be visible (cclx's CUDA comm takes CPU tensors too) and only "cpu" is
listed where none can be. Its creator: torchcomms' switch as every torch release 2.11..2.15 spells
it, and the route through torchcomms where torch does not take it. Needs neither torch nor
torchcomms."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import cclx_c10d  # noqa: E402


def test_cuda_first_where_a_gpu_may_be_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cclx_c10d.os.path, "exists", lambda p: p == "/dev/nvidiactl")
    assert cclx_c10d._devices() == ["cuda", "cpu"]


def test_cpu_only_without_gpus(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(cclx_c10d.os.path, "exists", lambda p: False)
    assert cclx_c10d._devices() == ["cpu"]
    monkeypatch.setattr(cclx_c10d.os.path, "exists", lambda p: True)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cclx_c10d._devices() == ["cpu"]


# torchcomms' switch for c10d, as torch 2.11, 2.12, 2.13, 2.14 and 2.15 spell it (read from each
# wheel's torch/distributed/config.py): the config entry `use_torchcomms`, whose default is the
# environment's TORCH_DISTRIBUTED_USE_TORCHCOMMS. A torch without the entry leaves the variable.
import types  # noqa: E402

import pytest  # noqa: E402

RELEASES = ["2.11", "2.12", "2.13", "2.14", "2.15"]


class _Config(types.SimpleNamespace):
    pass


@pytest.mark.parametrize("release", RELEASES)
def test_switch_read_from_config(release, monkeypatch):
    monkeypatch.delenv("TORCH_DISTRIBUTED_USE_TORCHCOMMS", raising=False)
    assert cclx_c10d._switch_on(_Config(use_torchcomms=True)) is True
    assert cclx_c10d._switch_on(_Config(use_torchcomms=False)) is False
    # the config wins over the variable it defaults from (set after import, as the tests do)
    monkeypatch.setenv("TORCH_DISTRIBUTED_USE_TORCHCOMMS", "1")
    assert cclx_c10d._switch_on(_Config(use_torchcomms=False)) is False


@pytest.mark.parametrize("value,on", [("1", True), ("true", True), ("True", True), ("0", False),
                                      ("", False), ("no", False)])
def test_switch_from_environment_without_config(value, on, monkeypatch):
    monkeypatch.setenv("TORCH_DISTRIBUTED_USE_TORCHCOMMS", value)
    assert cclx_c10d._switch_on(_Config()) is on


def _fake_modules(monkeypatch, calls):
    torch = types.ModuleType("torch")
    torch.device = lambda d: ("device", d)
    tc = types.ModuleType("torchcomms")
    comms = types.ModuleType("torchcomms._comms")

    def new_comm(backend, device, name=None, store=None, **kw):
        calls.append({"backend": backend, "device": device, "name": name, "store": store,
                      "rank": os.environ.get("TORCHCOMM_RANK"),
                      "size": os.environ.get("TORCHCOMM_SIZE"), **kw})
        return object()

    class Wrapper:
        def __init__(self, comm):
            self.comm = comm

    tc.new_comm = new_comm
    comms._BackendWrapper = Wrapper
    for name, mod in (("torch", torch), ("torchcomms", tc), ("torchcomms._comms", comms)):
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(cclx_c10d, "_switch_on", lambda config=None: True)
    monkeypatch.setattr(cclx_c10d, "_last", [None, None])
    return Wrapper


def _torch_helper(device, pg, opts):
    # stands in for torch's _new_process_group_helper: its loop names `device` and `pg`
    return cclx_c10d._create(opts, None)


def test_creator_routes_through_torchcomms_when_torch_does_not(monkeypatch):
    calls = []
    wrapper_cls = _fake_modules(monkeypatch, calls)
    monkeypatch.delenv("TORCHCOMM_RANK", raising=False)
    opts = types.SimpleNamespace(store="store-1", group_rank=1, group_size=3, timeout=None,
                                 group_id="0")
    pg = object()
    w = _torch_helper("cpu", pg, opts)
    assert isinstance(w, wrapper_cls)
    assert calls == [{"backend": "cclx", "device": ("device", "cpu"), "name": "0",
                      "store": "store-1", "rank": "1", "size": "3"}]
    assert "TORCHCOMM_RANK" not in os.environ  # restored
    # the same group's next device gets the same comm; another group a new one
    assert _torch_helper("cuda", pg, opts) is w and len(calls) == 1
    opts2 = types.SimpleNamespace(store="s2", group_rank=0, group_size=2, timeout=5,
                                  group_id="1")
    w2 = _torch_helper("cuda", object(), opts2)
    assert w2 is not w and calls[-1]["name"] == "1" and calls[-1]["timeout"] == 5
    assert calls[-1]["device"] == ("device", "cuda")  # the device torch is creating it for


def test_creator_names_the_switch_when_off(monkeypatch):
    monkeypatch.setattr(cclx_c10d, "_switch_on", lambda config=None: False)
    opts = types.SimpleNamespace(store=None, group_rank=0, group_size=1, timeout=None,
                                 group_id="0")
    with pytest.raises(RuntimeError, match="use_torchcomms = True"):
        cclx_c10d._create(opts, None)
