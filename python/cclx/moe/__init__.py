"""Expert-parallel (MoE) dispatch and combine over a cclx communicator (torch tensors; needs torch).

    import cclx.moe
    x, h = cclx.moe.dispatch(comm, tokens, topk_ids, topk_weights, num_experts=256)
    # x: [rows, H], the tokens of local expert l at rows h.expert_offsets[l] ..
    #    h.expert_offsets[l] + h.expert_counts[l] (rows past expert_offsets[L] are zeros)
    y = cclx.moe.combine(comm, expert_fn(x, h), h)          # [T, H], tokens' order

Experts are placed contiguously: rank r holds experts r*L .. r*L+L-1, L = num_experts / N. A token
travels once to each rank holding at least one of its top-k experts and appears in the block of
every local expert it chose there. combine returns, per token, the sum over its top-k slots of
weight * that expert's output row (f32 accumulation, out in expert_out's dtype); the rows for
experts on one rank are summed there, so each (token, rank) pair travels once each way.

Everything is torch ops on the tokens' device plus cclx collectives: no host synchronization
when the communicator has device_alltoallv_single, so a CUDA graph replays it with routing that
changes between replays. The design, wire format and modes: docs/design/moe.md.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import torch

from .. import _C
from . import _ops  # noqa: F401  (defines torch.ops.cclx.moe_dispatch / moe_combine)
from ._layout import FLOAT_DTYPES, Layout
from .buffer import Buffer, Handle, Recv, dequantize

MODES = ("auto", "low_latency", "throughput")

__all__ = ["MoEHandle", "dispatch", "combine", "MODES", "Buffer", "Handle", "Recv", "dequantize"]


@dataclasses.dataclass
class MoEHandle:
    """What dispatch() returns besides the expert tokens; combine() needs it. Tensors are on the
    tokens' device. expert_counts [L] / expert_offsets [L+1] (int64): the local experts' row
    blocks; send_counts / recv_counts [N]: rows sent to / received from each rank; the rest is
    the routing combine replays (see docs/design/moe.md)."""
    expert_counts: Any
    expert_offsets: Any
    send_counts: Any
    recv_counts: Any
    ent_pos: Any
    recv_w: Any
    flags: Any
    comb_idx: Any
    num_tokens: int
    hidden: int
    cap_send: int
    layout: Layout
    mode: str


def _bad(text: str) -> Exception:
    return _C.CclxInvalidArgument(f"cclx.moe.dispatch: {text}")


def _check(comm: Any, tokens: Any, topk_ids: Any, topk_weights: Any, E: int,
           max_tokens_per_rank: Optional[int], mode: str) -> Tuple[int, str]:
    """Host checks of shapes, dtypes and devices (nothing read from the device); returns
    (bound, mode)."""
    for name, t in (("tokens", tokens), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if not isinstance(t, torch.Tensor):
            raise _bad(f"{name} must be a torch tensor, not {type(t).__name__}")
    if tokens.dim() != 2 or tokens.dtype not in FLOAT_DTYPES:
        raise _bad(f"tokens must be [T, H] float32/bfloat16/float16, not {tuple(tokens.shape)} "
                   f"{tokens.dtype}")
    if tokens.shape[1] < 1:
        raise _bad("tokens must have a hidden size of at least 1")
    T = tokens.shape[0]
    if topk_ids.dim() != 2 or topk_ids.shape[0] != T or topk_ids.shape[1] < 1 or \
            topk_ids.dtype not in (torch.int64, torch.int32):
        raise _bad(f"topk_ids must be [T={T}, k>=1] int64/int32, not {tuple(topk_ids.shape)} "
                   f"{topk_ids.dtype}")
    if tuple(topk_weights.shape) != tuple(topk_ids.shape) or not topk_weights.is_floating_point():
        raise _bad(f"topk_weights must be float of topk_ids' shape {tuple(topk_ids.shape)}, not "
                   f"{tuple(topk_weights.shape)} {topk_weights.dtype}")
    dev = comm.get_device()
    want = "cuda" if comm._cuda else "cpu"
    for name, t in (("tokens", tokens), ("topk_ids", topk_ids), ("topk_weights", topk_weights)):
        if t.device.type != want or (comm._cuda and t.device.index != getattr(dev, "index", None)):
            raise _bad(f"{name} is on {t.device}, the communicator on {dev}")
    N = comm.get_size()
    if not isinstance(E, int) or E < 1 or E % N:
        raise _bad(f"num_experts ({E}) must be a positive multiple of the world size {N} "
                   "(experts are placed contiguously, num_experts / N per rank)")
    if mode not in MODES:
        raise _bad(f"mode must be one of {MODES}, not {mode!r}")
    if max_tokens_per_rank is not None:
        if int(max_tokens_per_rank) < T:
            raise _bad(f"{T} tokens exceed max_tokens_per_rank={max_tokens_per_rank}")
    if mode == "auto":
        mode = "throughput" if max_tokens_per_rank is None else "low_latency"
    if mode == "low_latency":
        if max_tokens_per_rank is None:
            raise _bad("mode='low_latency' needs max_tokens_per_rank (the fixed bound)")
        return int(max_tokens_per_rank), mode
    return T, mode


def dispatch(comm: Any, tokens: Any, topk_ids: Any, topk_weights: Any, num_experts: int, *,
             fp8: bool = False, max_tokens_per_rank: Optional[int] = None,
             mode: str = "auto") -> Tuple[Any, MoEHandle]:
    """Sends each token to the ranks of its top-k experts; returns (expert_tokens, handle).

    tokens [T, H] float32/bfloat16/float16; topk_ids [T, k] int64/int32 (global expert ids,
    0..num_experts-1); topk_weights [T, k] float (used as float32 by combine); all on the
    communicator's device. num_experts % world size == 0.

    expert_tokens [C, H] in tokens' dtype, C = N * bound * min(k, L): local expert l's tokens
    are rows handle.expert_offsets[l] .. + handle.expert_counts[l], ordered by source rank, then
    the source's token order; rows past expert_offsets[L] are zeros. An expert repeated in a
    token's top-k gets the token once, with the weights of its slots summed.

    fp8=True: rows travel as float8_e4m3fn with one float32 scale per 128 values (cclx's FP8
    block codec) and are dequantized on the receiver to tokens' dtype.

    mode: "low_latency" sizes every buffer from max_tokens_per_rank (required; the same on every
    rank; fixed shapes for CUDA graphs); "throughput" from T (every rank must pass the same T,
    or the largest); "auto": low_latency when max_tokens_per_rank is given, else throughput.
    More rows from a rank than the bound fail the exchange.

    Errors of the communicator propagate; an exchange that failed without raising (its output
    poisoned) makes the expert tokens, and later the combine output, NaN. Top-k ids out of
    range raise on CPU communicators (checked before any exchange) and make this rank's
    combine output NaN on CUDA ones (checked on the device)."""
    bound, mode = _check(comm, tokens, topk_ids, topk_weights, num_experts,
                         max_tokens_per_rank, mode)
    if not comm._cuda and tokens.shape[0] and not torch.compiler.is_compiling() and \
            bool(((topk_ids < 0) | (topk_ids >= num_experts)).any()):
        raise _bad(f"topk_ids holds ids outside 0..{num_experts - 1}")
    out = torch.ops.cclx.moe_dispatch(comm.handle, tokens, topk_ids, topk_weights,
                                      num_experts, bool(fp8), bound)
    lay = Layout(tokens.shape[0], tokens.shape[1], topk_ids.shape[1], comm.get_size(),
                 num_experts, bound, tokens.element_size(), bool(fp8))
    h = MoEHandle(*out[1:], num_tokens=tokens.shape[0], hidden=tokens.shape[1],
                  cap_send=lay.cap_send, layout=lay, mode=mode)
    return out[0], h


def combine(comm: Any, expert_out: Any, handle: MoEHandle) -> Any:
    """[T, H] in expert_out's dtype, the dispatching tokens' order: per token, the sum over its
    top-k slots of weight * the row its expert produced. expert_out [C, H] float (the rows of
    dispatch()'s expert_tokens, transformed; rows past expert_offsets[L] are ignored)."""
    lay = handle.layout
    if not isinstance(expert_out, torch.Tensor) or expert_out.dim() != 2 or \
            expert_out.dtype not in FLOAT_DTYPES or expert_out.shape[0] != lay.cap_out:
        raise _C.CclxInvalidArgument(
            f"cclx.moe.combine: expert_out must be [{lay.cap_out}, H] float32/bfloat16/float16 "
            f"(dispatch's expert_tokens shape), not "
            f"{tuple(getattr(expert_out, 'shape', ()))} {getattr(expert_out, 'dtype', None)}")
    if expert_out.device != handle.ent_pos.device:
        raise _C.CclxInvalidArgument(f"cclx.moe.combine: expert_out is on {expert_out.device}, "
                                     f"the dispatch on {handle.ent_pos.device}")
    return torch.ops.cclx.moe_combine(comm.handle, expert_out, handle.send_counts,
                                      handle.recv_counts, handle.ent_pos, handle.recv_w,
                                      handle.flags, handle.comb_idx, handle.cap_send)
