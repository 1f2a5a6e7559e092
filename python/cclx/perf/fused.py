"""cclx-perf -C allreduce_rmsnorm: the fused allreduce + residual add + RMSNorm
(Comm.all_reduce_rmsnorm) timed against NCCL's allreduce followed by torch's add and RMSNorm
(torch.nn.functional.rms_norm), in the same processes, over token rows (default 1..8192 tokens
at hidden 4096 and 8192).

Inputs are small integers (x) and halves (residual), so the allreduce and the residual add are
exact in every dtype; y is checked against float64 with a bound of a few roundings of the dtype
(the norm's float32 arithmetic differs between the two columns)."""
from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import bench as B
from . import measure as M

COLL = "allreduce_rmsnorm"
ALIASES = {"all_reduce_rmsnorm": COLL, "ar_rmsnorm": COLL, "rmsnorm": COLL}
EPS = 1e-6
ROUNDOFF = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}


def parse_tokens(text: str) -> List[int]:
    """'1:8192' (powers of two from 1 to 8192) or a comma list ('1,8,64')."""
    m = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text)
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo < 1 or hi < lo:
            raise ValueError(f"empty token range {text!r}")
        out, t = [], 1
        while t <= hi:
            if t >= lo:
                out.append(t)
            t *= 2
        return out or [lo]
    vals = [int(v) for v in text.split(",") if v.strip()]
    if not vals or min(vals) < 1:
        raise ValueError(f"expected positive token counts, got {text!r}")
    return vals


def parse_hidden(text: str) -> List[int]:
    vals = [int(v) for v in text.split(",") if v.strip()]
    if not vals or min(vals) < 1 or max(vals) >= 1 << 24:
        raise ValueError(f"expected hidden sizes in 1..16777215, got {text!r}")
    return vals


def plan(tokens: List[int], hidden: List[int], esize: int) -> List[Tuple[int, int, int]]:
    """(tokens, hidden, bytes) of every row: by hidden, then tokens."""
    return [(t, h, t * h * esize) for h in hidden for t in tokens]


class FusedCase:
    """Buffers of one column at one (tokens, hidden); the expected values are computed in float64
    when checked (never stored: 8192 x 8192 float64 would be 512 MiB per tensor)."""

    src = None  # nothing is written into the inputs

    def __init__(self, torch: Any, device: Any, dtype: str, tokens: int, hidden: int, rank: int,
                 n: int, like: Optional["FusedCase"] = None, kind: str = "cclx") -> None:
        self.torch, self.dev, self.dtype, self.n, self.rank = torch, device, dtype, n, rank
        self.tokens, self.hidden = tokens, hidden
        td = getattr(torch, B.DTYPES[dtype][2])
        self.td = td
        self.x = self._x(rank).to(td)
        self.res = self._res().to(td)
        self.w = self._w().to(td)
        self.y = torch.empty((tokens, hidden), dtype=td, device=device)
        self.r = torch.empty((tokens, hidden), dtype=td, device=device)
        self.ar = torch.empty((tokens, hidden), dtype=td, device=device) if kind == "nccl" else None

    def _idx(self) -> Any:
        t = self.torch
        return t.arange(self.tokens * self.hidden, device=self.dev,
                        dtype=t.int64).view(self.tokens, self.hidden)

    def _x(self, r: int) -> Any:
        return ((self._idx() * 7 + r * 3) % 5 - 2).to(self.torch.float64)

    def _res(self) -> Any:
        return (((self._idx() * 5 + 1) % 7 - 3) * 0.5).to(self.torch.float64)

    def _w(self) -> Any:
        t = self.torch
        j = t.arange(self.hidden, device=self.dev, dtype=t.int64)
        return (1.0 + ((j % 3) - 1) * 0.25).to(t.float64)

    def poison(self) -> None:
        self.y.fill_(float("nan"))
        self.r.fill_(float("nan"))

    def refill(self) -> None:
        pass

    def wrong(self, tol: float) -> int:
        """Elements of y or the residual output outside the float64 bound."""
        t = self.torch
        u = ROUNDOFF[self.dtype]
        s, a = self._x(0), self._x(0).abs()
        for r in range(1, self.n):
            xr = self._x(r)
            s, a = s + xr, a + xr.abs()
        res = self._res()
        r64 = s + res  # exact: small integers and halves
        a = a + res.abs()
        inv = t.rsqrt((r64 * r64).mean(-1, keepdim=True) + EPS)
        w = self._w()
        y64 = r64 * inv * w
        ytol = 4 * u * (y64.abs() + a * inv * w.abs()) + 1e-30
        bad = ~((self.y.to(t.float64) - y64).abs() <= ytol)
        bad |= ~((self.r.to(t.float64) - r64).abs() <= 2 * u * a)
        return int(bad.sum().item())


def columns(args: Any, torch: Any, comms: Dict[str, Any], device: Any, rank: int, n: int,
            hidden: int, hints: Dict[str, str], table: List[str]) -> List[M.Column]:
    """cclx (the fused call) and, when measured, nccl (NCCL allreduce + torch add + RMSNorm);
    the other baselines of the table have no number for these rows."""
    F = torch.nn.functional

    def case(kind):
        return lambda coll, count, like: FusedCase(torch, device, args.dtype, count // hidden,
                                                   hidden, rank, n, like, kind)

    cclx = comms["cclx"]
    h = hints or None

    def fused(c: FusedCase) -> Callable[[], Any]:
        return lambda: cclx.all_reduce_rmsnorm(c.x, c.res, c.w, EPS, out=(c.y, c.r), hints=h)

    cols = [M.Column("cclx", "cclx", cclx, case("cclx"), fused)]
    if "nccl" in comms:
        nccl, SUM = comms["nccl"], cclx_sum()

        def unfused(c: FusedCase) -> Callable[[], Any]:
            def step() -> None:
                nccl.all_reduce(c.x, SUM, False, None, output=c.ar)
                torch.add(c.ar, c.res, out=c.r)
                c.y = F.rms_norm(c.r, (hidden,), c.w, EPS)
            return step

        cols.append(M.Column("nccl", "nccl", nccl, case("nccl"), unfused))
    for name in table:
        if name not in ("cclx", "nccl"):
            cols.append(M.Column(name, name, None, case("cclx"), lambda c: (lambda: None),
                                 skip=lambda coll, nb: "not measured for allreduce_rmsnorm"))
    return cols


def cclx_sum() -> Any:
    import cclx

    return cclx.ReduceOp.SUM


def run_rows(args: Any, torch: Any, comms: Dict[str, Any], device: Any, rank: int, n: int,
             hints: Dict[str, str], table: List[str], barrier: Callable[[], None],
             timer: B.Timer, ex: M.Exchange, print_row: Callable[[Dict[str, Any]], None]
             ) -> List[Dict[str, Any]]:
    """Every allreduce_rmsnorm row, measured and printed; returns the rows."""
    esize = B.DTYPES[args.dtype][1]
    rows = []
    for h in args.hidden:
        cols = columns(args, torch, comms, device, rank, n, h, hints, table)
        for tokens, hidden, nbytes in plan(args.tokens, [h], esize):
            row = M.one_size(args, COLL, tokens * hidden, nbytes, n, cols, barrier, timer, 0.0,
                             ex, None, shared=False, corrupt=args.corrupt_check and rank == 0)
            row.update(count=tokens, tokens=tokens, hidden=hidden, op="sum",
                       label=f"rmsnorm/{hidden}")
            rows.append(row)
            print_row(row)
    return rows
