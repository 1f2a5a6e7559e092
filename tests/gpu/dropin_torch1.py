"""torch.distributed at world size 1 on the cclx NCCL drop-in (run under `cclx-nccl run`):
init_process_group without and with device_id (the second creates comms through ncclCommSplit),
all_reduce, the collectives the drop-in dispatches besides it (all_gather_into_tensor,
reduce_scatter_tensor, all_to_all_single with and without splits),
new_group, destroy_process_group. Prints one line per step and "DROPIN1 OK"."""
import ctypes
import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    mode = sys.argv[1]  # "plain" or "device_id"
    lib = ctypes.CDLL(None)
    assert hasattr(lib, "cclxDropinSetIntercept"), "the drop-in is not loaded (LD_PRELOAD)"
    real = ctypes.c_char_p()
    fn = lib.cclxDropinRealNccl
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
    assert fn(ctypes.byref(real)), "the drop-in found no real NCCL"
    print("real NCCL:", real.value.decode(), flush=True)
    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
    if mode == "device_id":
        dist.init_process_group("nccl", device_id=dev)
    else:
        dist.init_process_group("nccl")
    print("nccl version seen by torch:", torch.cuda.nccl.version(), flush=True)
    g = torch.Generator(device=dev).manual_seed(1)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.randn(4097, device=dev, generator=g).to(dtype)
        y = x.clone()
        dist.all_reduce(y)
        torch.cuda.synchronize()
        assert torch.equal(x, y), f"all_reduce at world size 1 changed {dtype} data"
    sub = dist.new_group([0])
    z = torch.arange(1000, device=dev, dtype=torch.float32)
    dist.all_reduce(z, group=sub)
    torch.cuda.synchronize()
    assert torch.equal(z, torch.arange(1000, device=dev, dtype=torch.float32))
    out = [torch.empty(7, device=dev)]
    dist.all_gather(out, torch.full((7,), 3.0, device=dev))
    torch.cuda.synchronize()
    assert torch.equal(out[0], torch.full((7,), 3.0, device=dev))
    # ncclAllGather, ncclReduceScatter, ncclAlltoAll (and send/recv groups for the splits): at
    # world size 1 they copy, whatever runs them.
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        x = torch.randn(3001, device=dev, generator=g).mul(100).to(dtype)
        outs = {k: torch.full_like(x, -7) for k in ("ag", "rs", "a2a", "a2av")}

        def run():
            dist.all_gather_into_tensor(outs["ag"], x)
            dist.reduce_scatter_tensor(outs["rs"], x)
            dist.all_to_all_single(outs["a2a"], x)
            dist.all_to_all_single(outs["a2av"], x, [3001], [3001])

        run()
        torch.cuda.synchronize()
        for k, v in outs.items():
            assert torch.equal(v, x), f"{k} at world size 1 changed {dtype} data"
    print("all_gather / reduce_scatter / all_to_all(_v) ok", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    print("DROPIN1 OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
