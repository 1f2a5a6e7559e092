"""One rank of a rendezvous scenario (tests/python/failure/test_rendezvous.py): creates a comm with
new_comm, runs an all_reduce and finalizes it, then prints one line "RESULT {json}" with what
happened. RDV_KW (JSON) holds new_comm's keywords, RDV_DEVICE the device, RDV_FINALIZE_DELAY
seconds to wait before finalize; RDV_EXIT=1 leaves with os._exit right after finalize;
RDV_INIT_PG=1 also runs torch.distributed (gloo) on MASTER_ADDR:MASTER_PORT."""
import json
import os
import sys
import time

import numpy as np

import cclx


def main() -> None:
    out = {"rank": int(os.environ.get("RANK", "0"))}
    kw = json.loads(os.environ.get("RDV_KW", "{}"))
    t0 = time.monotonic()
    try:
        c = cclx.new_comm("cclx", os.environ.get("RDV_DEVICE", "cpu"), name="rdv", **kw)
        x = np.full(8, c.get_rank() + 1, np.float32)
        c.all_reduce(x)
        out["sum"] = float(x[0])
        if os.environ.get("RDV_INIT_PG") == "1":  # torch.distributed meets on MASTER_PORT too
            import torch
            import torch.distributed as dist

            dist.init_process_group("gloo")
            t = torch.ones(3)
            dist.all_reduce(t)
            out["torch_sum"] = float(t[0])
            dist.destroy_process_group()
        time.sleep(float(os.environ.get("RDV_FINALIZE_DELAY", "0")))
        out["finalize_start"] = time.time()
        c.finalize()
        out["finalize_end"] = time.time()
        out["ok"] = True
    except Exception as e:  # noqa: BLE001 - reported to the test
        out.update(ok=False, type=type(e).__name__, msg=str(e), failed_at=time.time(),
                   isinstance={k: isinstance(e, getattr(cclx, k)) for k in
                               ("CclxTimeoutError", "CclxInvalidArgument", "CclxError")})
    out["s"] = time.monotonic() - t0
    print("RESULT " + json.dumps(out), flush=True)
    if os.environ.get("RDV_EXIT") == "1":
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
