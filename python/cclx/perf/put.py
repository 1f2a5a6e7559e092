"""cclx-perf -C put: one-sided put + signal + wait_signal on a window, timed as one op.

Every rank puts `size` bytes into the next rank's window (the ring), signals it, and waits for
the previous rank's signal: the time of one op is the latency of a put + signal round through
the ring, the bandwidth size / time. The window is registered once with the largest row's
elements (GPU: a CUDA tensor; CPU: cclx.empty_shared) and each row uses its first `count`
elements. Checked like the collectives: the previous rank's values must be in the window after
the op; the check's poison is followed by a barrier, so no rank's put lands before the
receiver poisoned."""
from __future__ import annotations

from typing import Any, Dict, List

from . import bench as B


class PutWindow:
    """The window of one column. finalize() deregisters it (collective)."""

    def __init__(self, comm: Any, xp: B.Xp, numel: int, rank: int, n: int) -> None:
        import cclx

        self.comm, self.rank, self.n = comm, rank, n
        if xp.torch is not None:
            self.buf = xp.empty(numel)
        else:
            self.buf = cclx.empty_shared((numel,), xp.dt)
        self.win = comm.new_window(self.buf)

    def recv(self, count: int, send: Any) -> Any:
        return self.buf[:count]

    def call(self, case: B.Case, hints: Dict[str, str]):
        win, s, h = self.win, case.send, hints or None
        nxt, prv = (self.rank + 1) % self.n, (self.rank - 1) % self.n

        def op():
            win.put(s, nxt, 0, False, h)
            win.signal(nxt)
            win.wait_signal(prv)
        return op

    def finalize(self) -> None:
        self.win.tensor_deregister()


def with_put(col: Any, comm: Any, xp: B.Xp, rows_plan: List, make_case: Any,
             hints: Dict[str, str], rank: int, n: int) -> PutWindow:
    """Makes column `col` (a cclx comm column) run the put rows through a window; returns the
    window (close it before the comm)."""
    numel = max([k for c, k, _ in rows_plan if c == "put"] + [1])
    pw = PutWindow(comm, xp, numel, rank, n)
    base_case, base_call = col.case, col.call

    def case(coll, count, like):
        if coll != "put":
            return base_case(coll, count, like)
        c = make_case(coll, count, like, None, pw.recv)
        c.barrier = comm.barrier
        return c

    def call(c):
        return pw.call(c, hints) if c.coll == "put" else base_call(c)

    col.case, col.call = case, call
    return pw


def skip_put(col: Any) -> None:
    """A baseline column without one-sided puts: put rows are not measured."""
    old = col.skip
    col.skip = lambda coll, nbytes: ("no one-sided put" if coll == "put" else old(coll, nbytes))
