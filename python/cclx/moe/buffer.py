"""cclx.moe.Buffer: the create-once expert-parallel buffer (include/cclx/moe.hpp; design in
docs/design/moe.md).

    buf = cclx.moe.Buffer(comm, max_tokens_per_rank=128, hidden=7168, num_experts=256,
                          top_k=8, dtype=torch.bfloat16, fp8=True)
    recv, h = buf.dispatch(x, topk_ids, topk_weights)     # one kernel, no host sync
    # recv.x [N*B, H] (FP8: float8_e4m3fn codes, recv.scales [N*B, nb] float32): rank-major,
    # row s*B + p = the p-th token rank s sent here; the tokens of local expert l are the rows
    # h.entry_rows[h.expert_offsets[l] : h.expert_offsets[l+1]] (int32 tensors on the device)
    y = buf.combine(expert_out, h)                        # expert_out [rows >= entries, H]

The route (buf.route) comes from one table in C++ (MoeBuffer::route): "kernels" (CUDA, ranks
of one host or world size 1), "host" (CPU comms: the CPU twin, the same bits), "composed" (any
other comm: torch ops around the comm's all-to-all-v, _composed.py), all behind this API.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from .. import _C
from .._work import _current_stream
from ._layout import FLOAT_DTYPES

_DTYPE_CODE = {torch.float32: 0, torch.float16: 2, torch.bfloat16: 3}
_ID_DTYPES = (torch.int32, torch.int64)
BLOCK = 128


def _bad(op: str, text: str) -> Exception:
    return _C.CclxInvalidArgument(f"cclx.moe.Buffer.{op}: {text}")


class Recv:
    """What dispatch received: x [N*B, H] (rank-major slots; FP8: float8_e4m3fn codes) and,
    with FP8, scales [N*B, ceil(H/128)] float32 (cclx's codec metas: the scale of each block of
    128 values; a negative sign marks a block holding +-Inf, whose codes 0x7E / 0xFE then mean
    +-Inf: dequantize() handles it). Views of the buffer's memory: valid until the next
    dispatch."""

    __slots__ = ("x", "scales")

    def __init__(self, x: Any, scales: Any) -> None:
        self.x, self.scales = x, scales

    def dequantize(self, dtype: Any = torch.float32) -> Any:
        """x as `dtype` (FP8: code * scale in float32, rounded once)."""
        return self.x.to(dtype) if self.scales is None else dequantize(self.x, self.scales, dtype)


class Handle:
    """The routing of one dispatch, replayed by combine() and by a cached dispatch
    (dispatch(x, handle=h)). Tensors (int32, on the buffer's device) are views of the buffer's
    memory, rewritten by the next dispatch: recv_counts [N] tokens from each rank,
    expert_counts [L], expert_offsets [L+1], entry_rows [C] (entry i's row in recv.x; local
    expert l owns entries expert_offsets[l] .. expert_offsets[l+1]). num_tokens: this rank's T."""

    __slots__ = ("recv_counts", "expert_counts", "expert_offsets", "entry_rows", "num_tokens",
                 "_buf", "_seq")

    def __init__(self, buf: "Buffer", T: int, seq: int) -> None:
        self.recv_counts, self.expert_counts, self.expert_offsets, self.entry_rows = buf._hviews
        self.num_tokens, self._buf, self._seq = T, buf, seq


def dequantize(codes: Any, scales: Any, dtype: Any = torch.float32) -> Any:
    """FP8 rows of dispatch (codes [R, H] float8_e4m3fn, scales [R, nb] codec metas) as
    `dtype`: code * scale in float32 (blocks flagged INF: codes 0x7E / 0xFE are +-Inf)."""
    R, H = codes.shape
    nb = scales.shape[1]
    c = codes.float()
    pad = nb * BLOCK - H
    if pad:
        c = torch.nn.functional.pad(c, (0, pad))
    inf = (scales < 0).unsqueeze(-1)  # the sign bit: an INF block (no host read: capturable)
    v = c.view(R, nb, BLOCK) * scales.abs().unsqueeze(-1)
    raw = codes.view(torch.uint8)
    if pad:
        raw = torch.nn.functional.pad(raw, (0, pad))
    raw = raw.view(R, nb, BLOCK)
    v = torch.where(inf & (raw == 0x7E), float("inf"), v)
    v = torch.where(inf & (raw == 0xFE), float("-inf"), v)
    return v.view(R, nb * BLOCK)[:, :H].to(dtype)


class Buffer:
    """The expert-parallel buffer of a communicator (collective to create; see the module doc).

    max_tokens_per_rank B: the most tokens any rank passes to one dispatch; hidden H;
    num_experts E (a multiple of the world size N; rank r holds experts r*L .. r*L+L-1,
    L = E / N); top_k k (1..16); dtype of tokens, expert outputs and the combine output
    (float32 / bfloat16 / float16); fp8: dispatch rows travel as FP8 e4m3 with one float32 scale
    per 128 values (cclx's block codec). `bytes`: this rank's communication memory.
    route: None takes the table's choice (MoeBuffer::route); "composed" forces the composed
    path on any communicator (comparisons, tests). The CUDA kernels' launch shape (no output
    bit depends on it): num_sms, thread blocks per kernel (0..128; None: CCLX_MOE_MAX_BLOCKS,
    whose 0 is by size, at most one per SM); chunk_tokens, tokens per routing chunk of the
    dispatch kernel (None: CCLX_MOE_CHUNK_TOKENS, whose 0 is the most whose tables fit).
    `blocks` and `chunk_tokens` report what the buffer runs (0 off the kernels).
    ring_tokens (no output bit depends on it either; the same on every rank): combine rows per
    expert rank at each owner (None: 4096). When max_tokens_per_rank is larger, combine runs in
    rounds of `ring_round` tokens through a ring of `ring_rows` rows per expert rank, so its
    memory does not grow with the batch (docs/design/moe.md, "Combine")."""

    def __init__(self, comm: Any, max_tokens_per_rank: int, hidden: int, num_experts: int,
                 top_k: int, dtype: Any = torch.bfloat16, fp8: bool = False,
                 route: Optional[str] = None, num_sms: Optional[int] = None,
                 chunk_tokens: Optional[int] = None,
                 ring_tokens: Optional[int] = None) -> None:
        if dtype not in FLOAT_DTYPES:
            raise _bad("__init__", f"dtype must be float32, bfloat16 or float16, not {dtype}")
        self.comm = comm
        self.num_ranks, self.rank = comm.get_size(), comm.get_rank()
        self.max_tokens, self.hidden = int(max_tokens_per_rank), int(hidden)
        self.num_experts, self.top_k = int(num_experts), int(top_k)
        self.dtype, self.fp8 = dtype, bool(fp8)
        self.local_experts = self.num_experts // max(self.num_ranks, 1)
        self._cuda, self._dev = comm._cuda, comm._dev
        self._dev_index = self._dev if self._cuda else -1
        args = (comm._c, self.max_tokens, self.hidden, self.num_experts, self.top_k,
                _DTYPE_CODE[dtype], self.fp8, int(num_sms or 0), int(chunk_tokens or 0),
                int(ring_tokens or 0))
        self.route, self.why = _C.MoeBuffer.route(*args)
        if route not in (None, self.route, "composed"):
            raise _bad("__init__", f"route {route!r}: this communicator's route is "
                                   f"{self.route!r} ({self.why or 'no reason to differ'})")
        if route == "composed" and self.route != "composed":
            self.route, self.why = "composed", "asked for (route='composed')"
        self._seq = 0
        self._last: Optional[Handle] = None
        if self.route == "composed":
            from ._composed import Composed

            self._b = None
            self._impl = Composed(self)
            self.bytes = self._impl.bytes
            self._views = self._impl.views
            self.blocks = self.chunk_tokens = self.ring_rows = self.ring_round = 0
        else:
            self._b = _C.MoeBuffer.create(*args)
            self._impl = None
            self.bytes = self._b.bytes
            self.blocks, self.chunk_tokens = self._b.blocks, self._b.chunk_tokens
            self.ring_rows, self.ring_round = self._b.ring_rows, self._b.ring_round
            self._views = self._make_views()
        self.recv = Recv(self._views["x"], self._views.get("scales"))
        v = self._views
        self._hviews = (v["recv_counts"], v["expert_counts"], v["expert_offsets"], v["entry_rows"])
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) if self._cuda else None
        self._raw_stream = raw

    # ------------------------------------------------------------------ views
    def _make_views(self) -> dict:
        mem = self._b.memory(True, self._dev if self._cuda else 0)
        off = self._b.offsets
        N, B, H, L = self.num_ranks, self.max_tokens, self.hidden, self.local_experts
        S = N * B
        row = off["recv_x_row_bytes"]

        def i32(at: int, n: int) -> Any:
            return mem[at:at + 4 * n].view(torch.int32)

        v = {}
        raw = mem[off["recv_x"]:off["recv_x"] + S * row].view(S, row)
        if self.fp8:
            v["x"] = raw[:, :H].view(torch.float8_e4m3fn)
            nb = (H + BLOCK - 1) // BLOCK
            v["scales"] = mem[off["recv_scales"]:off["recv_scales"] + 4 * S * nb].view(
                torch.float32).view(S, nb)
        else:
            v["x"] = raw.view(self.dtype)[:, :H]
        v["recv_counts"] = i32(off["recv_counts"], N)
        v["expert_counts"] = i32(off["expert_counts"], L)
        v["expert_offsets"] = i32(off["expert_offsets"], L + 1)
        v["entry_rows"] = i32(off["entry_rows"], off["entry_cap"])
        return v

    # ------------------------------------------------------------------ calls
    def _stream(self) -> int:
        if not self._cuda:
            return 0
        raw = self._raw_stream
        return int(raw(self._dev)) if raw is not None else _current_stream(0, self._dev)

    def _fast_args(self, x: Any, ids: Any, w: Any) -> int:
        """T when x, topk_ids and topk_weights are exactly what the kernels take (the common
        case: every check in a handful of attribute reads); -1 otherwise (dispatch then runs the
        detailed checks, which raise or convert)."""
        try:
            xs, ids_s = x.shape, ids.shape
            T = xs[0]
            dev = self._dev_index
            if len(xs) == 2 and xs[1] == self.hidden and T <= self.max_tokens and \
                    x.dtype is self.dtype and ids_s == (T, self.top_k) and w.shape == ids_s and \
                    w.dtype is torch.float32 and ids.dtype in _ID_DTYPES and \
                    x.is_contiguous() and ids.is_contiguous() and w.is_contiguous() and \
                    x.get_device() == dev and ids.get_device() == dev and w.get_device() == dev:
                return T
        except (AttributeError, TypeError, IndexError):
            pass
        return -1

    def _check_tokens(self, op: str, x: Any) -> int:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.hidden or \
                x.dtype != self.dtype or not x.is_contiguous():
            raise _bad(op, f"x must be a contiguous [T, {self.hidden}] {self.dtype} tensor, not "
                           f"{tuple(getattr(x, 'shape', ()))} {getattr(x, 'dtype', type(x))}")
        if x.get_device() != self._dev_index:
            raise _bad(op, f"x is on {x.device}, the communicator on {self.comm.get_device()}")
        T = x.shape[0]
        if T > self.max_tokens:
            raise _bad(op, f"{T} tokens exceed max_tokens_per_rank={self.max_tokens}")
        return T

    def dispatch(self, x: Any, topk_ids: Any = None, topk_weights: Any = None, *,
                 handle: Optional[Handle] = None, timeout: float = 0.0,
                 return_recv_hook: bool = False) -> Any:
        """Collective: sends each token of x [T, H] to the ranks of its top-k experts
        (topk_ids [T, k] int32/int64, ids outside 0..E-1 dropped and the token's combine row
        NaN; topk_weights [T, k] float32). handle=h instead of ids and weights: cached mode,
        the routing of h (the last dispatch) with new tokens of the same T. Returns
        (recv, handle); see Recv and Handle.

        return_recv_hook=True: only the send runs now; returns (recv, handle, hook), and
        hook() (collective, on the then current stream) receives. Between the two the caller
        runs other work (another micro-batch's experts) while the tokens travel; recv's views
        hold this dispatch's data only after hook(), and the buffer takes no other call before
        it. The composed route does the whole dispatch at once (its hook does nothing)."""
        if handle is None and self._impl is None:
            T = self._fast_args(x, topk_ids, topk_weights)
            if T >= 0:
                self._b.dispatch(x.data_ptr(), topk_ids.data_ptr(), topk_ids.dtype is torch.int64,
                                 topk_weights.data_ptr(), T, self._stream(), timeout,
                                 return_recv_hook)
                self._seq += 1
                h = self._last = Handle(self, T, self._seq)
                if return_recv_hook:
                    return self.recv, h, self._recv_hook(timeout)
                return self.recv, h
        T = self._check_tokens("dispatch", x)
        if handle is not None:
            self._check_handle("dispatch", handle)
            if T != handle.num_tokens:
                raise _bad("dispatch", f"cached mode: {T} tokens, the handle's dispatch had "
                                       f"{handle.num_tokens}")
            if self._impl is not None:
                self._impl.dispatch(x, None, None, cached=True)
            else:
                self._b.dispatch_cached(x.data_ptr(), self._stream(), timeout, return_recv_hook)
        else:
            k = self.top_k
            if not isinstance(topk_ids, torch.Tensor) or tuple(topk_ids.shape) != (T, k) or \
                    topk_ids.dtype not in (torch.int32, torch.int64):
                raise _bad("dispatch", f"topk_ids must be [{T}, {k}] int32/int64, not "
                                       f"{tuple(getattr(topk_ids, 'shape', ()))} "
                                       f"{getattr(topk_ids, 'dtype', type(topk_ids))}")
            if not isinstance(topk_weights, torch.Tensor) or \
                    tuple(topk_weights.shape) != (T, k) or not topk_weights.is_floating_point():
                raise _bad("dispatch", f"topk_weights must be float [{T}, {k}], not "
                                       f"{tuple(getattr(topk_weights, 'shape', ()))}")
            if topk_ids.get_device() != self._dev_index or \
                    topk_weights.get_device() != self._dev_index:
                raise _bad("dispatch", "topk_ids / topk_weights are not on the communicator's "
                                       "device")
            if not topk_ids.is_contiguous():
                topk_ids = topk_ids.contiguous()
            if topk_weights.dtype != torch.float32 or not topk_weights.is_contiguous():
                topk_weights = topk_weights.float().contiguous()
            if self._impl is not None:
                self._impl.dispatch(x, topk_ids, topk_weights, cached=False)
            else:
                self._b.dispatch(x.data_ptr(), topk_ids.data_ptr(),
                                 topk_ids.dtype == torch.int64, topk_weights.data_ptr(), T,
                                 self._stream(), timeout, return_recv_hook)
            self._seq += 1
        h = Handle(self, T, self._seq)
        self._last = h
        if return_recv_hook:
            return self.recv, h, self._recv_hook(timeout)
        return self.recv, h

    def _recv_hook(self, timeout: float) -> Any:
        """The receive of the dispatch just sent with return_recv_hook (composed route: nothing
        is left to do)."""
        if self._impl is not None:
            return lambda: None
        b = self._b

        def hook() -> None:
            b.dispatch_recv(self._stream(), timeout)

        return hook

    def _check_handle(self, op: str, handle: Any) -> None:
        if not isinstance(handle, Handle) or handle._buf is not self:
            raise _bad(op, "the handle is not one of this buffer's dispatches")
        if handle._seq != self._seq:
            raise _bad(op, "the handle's routing was replaced by a later dispatch of this "
                           "buffer (a handle is valid until the next dispatch)")

    def combine(self, expert_out: Any, handle: Handle, *, out: Any = None,
                timeout: float = 0.0) -> Any:
        """Collective: [T, H] in dtype, the dispatching tokens' order: per token, the sum over
        its top-k experts of weight * that expert's output row (f32 sums, rounded once on each
        side). expert_out [rows, H] dtype: row i is entry i's output (entries of local expert l:
        handle.expert_offsets[l] .. [l+1]); an entry at or past `rows` makes its tokens' rows
        NaN. out: an optional [T, H] dtype output."""
        eo = expert_out
        if handle is self._last and self._impl is None and handle is not None:
            try:
                es, dev = eo.shape, self._dev_index
                fast = len(es) == 2 and es[1] == self.hidden and eo.dtype is self.dtype and \
                    eo.is_contiguous() and eo.get_device() == dev and handle._seq == self._seq
                if fast and out is not None:
                    fast = out.shape == (handle.num_tokens, self.hidden) and \
                        out.dtype is self.dtype and out.is_contiguous() and out.get_device() == dev
            except (AttributeError, TypeError, IndexError):
                fast = False
            if fast:
                if out is None:
                    out = torch.empty(handle.num_tokens, self.hidden, dtype=self.dtype,
                                      device=eo.device)
                self._b.combine(eo.data_ptr(), es[0], out.data_ptr(), self._stream(), timeout)
                return out
        self._check_handle("combine", handle)
        op = "combine"
        if not isinstance(eo, torch.Tensor) or eo.dim() != 2 or eo.shape[1] != self.hidden or \
                eo.dtype != self.dtype or not eo.is_contiguous():
            raise _bad(op, f"expert_out must be a contiguous [rows, {self.hidden}] {self.dtype} "
                           f"tensor, not {tuple(getattr(eo, 'shape', ()))} "
                           f"{getattr(eo, 'dtype', type(eo))}")
        if eo.get_device() != self._dev_index:
            raise _bad(op, f"expert_out is on {eo.device}, the communicator on "
                           f"{self.comm.get_device()}")
        T = handle.num_tokens
        if out is None:
            out = torch.empty(T, self.hidden, dtype=self.dtype, device=eo.device)
        elif not isinstance(out, torch.Tensor) or tuple(out.shape) != (T, self.hidden) or \
                out.dtype != self.dtype or not out.is_contiguous() or \
                out.get_device() != self._dev_index:
            raise _bad(op, f"out must be a contiguous [{T}, {self.hidden}] {self.dtype} tensor "
                           "on the communicator's device")
        if self._impl is not None:
            return self._impl.combine(eo, out)
        self._b.combine(eo.data_ptr(), eo.shape[0], out.data_ptr(), self._stream(), timeout)
        return out

    def destroy(self) -> None:
        """Collective: every rank done with the buffer, then its memory is freed (views and
        handles become invalid). Without it the memory stays allocated until the process ends."""
        if self._b is not None:
            self._b.destroy()
        self._b = None

    def __repr__(self) -> str:
        return (f"cclx.moe.Buffer(route={self.route!r}, ranks={self.num_ranks}, "
                f"max_tokens_per_rank={self.max_tokens}, hidden={self.hidden}, "
                f"experts={self.num_experts}, top_k={self.top_k}, dtype={self.dtype}, "
                f"fp8={self.fp8}, bytes={self.bytes})")
