"""Hello world on CPU processes with numpy (no GPU, no torch needed).

    torchrun --nproc-per-node 2 examples/hello_cpu.py
    (or set RANK and WORLD_SIZE yourself; MASTER_ADDR:MASTER_PORT default to 127.0.0.1:29500)
"""
import numpy as np

import cclx

comm = cclx.new_comm("cclx", "cpu", name="my_comm")
rank, size = comm.get_rank(), comm.get_size()
print(f"I am rank {rank} of {size}!")
t = np.full((10, 20), rank, dtype=np.float32)
comm.allreduce(t, cclx.ReduceOp.SUM, async_op=False)
expected = size * (size - 1) / 2
ok = bool((t == expected).all())
print(f"rank {rank}: sum {t[0, 0]} expected {expected}: {'OK' if ok else 'WRONG'}")
comm.finalize()
if not ok:
    raise SystemExit(1)
