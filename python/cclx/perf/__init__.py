"""cclx-perf: nccl-tests style benchmark of cclx, with NCCL measured in the same run
(`python -m cclx.perf`, `tools/cclx-perf`, the `cclx-perf` script). cli: arguments, launcher,
the rank's loop; bench: buffers and timing; measure: one row; fused, put: the fused allreduce +
RMSNorm and window put rows; baselines, nccl_api: NCCL (and its symmetric memory) measured beside
cclx, NCCL's C API through the drop-in; report: table, JSON, plots."""
from __future__ import annotations

from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    """Runs cclx-perf (cli.main)."""
    from .cli import main as run

    return run(argv)
