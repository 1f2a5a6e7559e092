"""The bodies of cclx.moe's dispatch and combine: routing layout in torch ops on the tokens'
device (no .item()/.tolist() on the data path, so nothing waits for the device on CUDA), the
two exchanges of the dispatch (per-rank row counts, then the rows) and the one of the combine.

Names: T tokens here, k top-k slots, N ranks, E experts, L = E / N per rank (rank r holds experts
r*L .. r*L+L-1), R = lay.cap_recv received-row capacity, C = lay.cap_out per-expert-row capacity.
"""
from __future__ import annotations

from typing import Any, List

import torch

from .. import _C
from ._layout import NONE, Layout, pack, unpack_meta, unpack_tokens


def a2av(comm: Any, output: Any, input: Any, output_split_sizes: Any,
         input_split_sizes: Any) -> None:
    """All-to-all-v with split sizes (int64 rows) in tensors where the data is: the comm's
    device_alltoallv_single when it has one (no host synchronization, CUDA-graph capturable);
    else the split sizes are read on the host (.tolist(), which waits for the device on CUDA)
    and all_to_all_v_single runs on the first sum(splits) rows. Capacities are output.shape[0]
    and input.shape[0]; splits that do not fit raise (fallback) or fail the collective."""
    fn = getattr(comm, "device_alltoallv_single", None)
    if fn is not None:
        fn(output, input, output_split_sizes, input_split_sizes)
        return
    o = [int(v) for v in output_split_sizes.tolist()]
    i = [int(v) for v in input_split_sizes.tolist()]
    if min(o + i, default=0) < 0 or sum(o) > output.shape[0] or sum(i) > input.shape[0]:
        raise _C.CclxInvalidArgument(
            f"cclx.moe: all-to-all-v split sizes {i} (send, capacity {input.shape[0]} rows) / "
            f"{o} (receive, capacity {output.shape[0]} rows) do not fit: a rank dispatched more "
            "tokens than the bound (max_tokens_per_rank, or T of this rank in throughput mode)")
    comm.all_to_all_v_single(output[:sum(o)], input[:sum(i)], o, i)


def dispatch_impl(comm: Any, tokens: Any, topk_ids: Any, topk_weights: Any, E: int, fp8: bool,
                  bound: int) -> List[Any]:
    """Returns [expert_tokens [C, H], expert_counts [L], expert_offsets [L+1], send_counts [N],
    recv_counts [N], ent_pos [R, k], recv_w [R, k], flags [2], comb_idx [T, k]] (see
    dispatch() in __init__.py for the first three; the rest is the handle)."""
    dev = tokens.device
    T, H = tokens.shape
    k = topk_ids.shape[1]
    N, rank = comm.get_size(), comm.get_rank()
    lay = Layout(T, H, k, N, E, bound, tokens.element_size(), fp8)
    L, S, R, C = lay.L, lay.cap_send, lay.cap_recv, lay.cap_out
    i64 = dict(dtype=torch.int64, device=dev)

    # --- sender side: which ranks each token goes to, and where in the send buffer.
    ids = topk_ids.to(torch.int64)
    ok = (ids >= 0) & (ids < E)
    dest = torch.where(ok, torch.div(ids, L, rounding_mode="floor"), N)  # N: nowhere
    mask = torch.zeros(T, N + 1, dtype=torch.bool, device=dev).scatter_(1, dest, True)[:, :N]
    csum = mask.to(torch.int64).cumsum(0)  # [T, N]
    send_counts = mask.sum(0, dtype=torch.int64)
    send_off = send_counts.cumsum(0) - send_counts
    pos = torch.where(mask, send_off + csum - 1, S)  # [T, N]; S: the dump slot
    slot_tok = torch.zeros(S + 1, **i64)
    slot_tok.scatter_(0, pos.flatten(), torch.arange(T, **i64).repeat_interleave(N))
    # An expert repeated in a token's top-k travels once, with the weights of its slots summed
    # (in slot order), so a token is at most once in each expert's block.
    slot = torch.arange(k, device=dev)
    earlier = slot.unsqueeze(1) > slot.unsqueeze(0)  # [j, j']: j' < j
    same_id = (ids.unsqueeze(2) == ids.unsqueeze(1)) & ok.unsqueeze(2)
    w_sum = (same_id * topk_weights.float().unsqueeze(1)).sum(-1)
    lead = ok & ~(same_id & earlier).any(-1)
    rows = pack(tokens, torch.where(lead, ids, NONE), torch.where(lead, w_sum, 0.0), lay)
    send = rows.index_select(0, slot_tok[:S])

    # The owner's combine: for each top-k slot, the returned row of its rank, once per rank.
    dup = (dest.unsqueeze(2) == dest.unsqueeze(1)) & earlier
    first = ok & ~dup.any(-1)
    comb_idx = torch.where(first, pos.gather(1, dest.clamp(max=N - 1)), -1)

    # --- exchange 1: rows per rank; exchange 2: the rows.
    recv_counts = torch.empty(N, **i64)
    comm.all_to_all_single(recv_counts, send_counts)
    recv = torch.empty(R + 2, lay.width, dtype=torch.uint8, device=dev)
    recv[R].zero_()      # row R: zeros (what unused per-expert rows show)
    recv[R + 1].fill_(255)  # row R+1: all ones, NaN in every float format (poison)
    a2av(comm, recv[:R], send, recv_counts, send_counts)

    # --- receiver side: per-local-expert blocks in (source rank, source order) order.
    total = recv_counts.clamp(min=0).sum()
    row_ok = (torch.arange(R, **i64) < total).unsqueeze(1)
    eids, w = unpack_meta(recv[:R], lay)
    known = ((eids >= 0) & (eids < E)) | (eids == NONE)
    # A failed exchange leaves all-ones bytes (negative counts, id -1): poison, never drop.
    bad_recv = (recv_counts < 0).any() | (row_ok & ~known).any()
    mine = row_ok & (eids >= rank * L) & (eids < rank * L + L)
    key = torch.where(mine, eids - rank * L, L).flatten()  # [R*k]; L: not here
    skey, order = torch.sort(key, stable=True)
    counts = torch.zeros(L + 1, **i64).scatter_add_(0, key, torch.ones_like(key))[:L]
    offsets = torch.cat([torch.zeros(1, **i64), counts.cumsum(0)])
    ent_row = torch.where(skey[:C] < L, torch.div(order[:C], k, rounding_mode="floor"), R)
    ent_row = torch.where(bad_recv, R + 1, ent_row)
    expert_tokens = unpack_tokens(recv, lay, tokens.dtype).index_select(0, ent_row)
    inv = torch.empty(R * k, **i64).scatter_(0, order, torch.arange(R * k, **i64))
    ent_pos = torch.where(mine.flatten() & (inv < C), inv, -1).view(R, k)
    recv_w = torch.where(mine, w, 0.0)
    flags = torch.stack([bad_recv, ~ok.all()])
    return [expert_tokens, counts, offsets, send_counts, recv_counts, ent_pos, recv_w, flags,
            comb_idx]


def combine_impl(comm: Any, expert_out: Any, send_counts: Any, recv_counts: Any, ent_pos: Any,
                 recv_w: Any, flags: Any, comb_idx: Any, cap_send: int) -> Any:
    """[T, H] in expert_out's dtype: per token, sum over its top-k slots of weight * the expert's
    output row (f32 accumulation). The expert side sums the slots of each received row (one per
    (token, rank)) and sends that row back; the owner adds its ranks' rows in slot order."""
    R, k = ent_pos.shape
    T = comb_idx.shape[0]
    H = expert_out.shape[1]
    dev = expert_out.device
    nan = torch.full((), float("nan"), dtype=torch.float32, device=dev)  # fills: capturable
    zero = torch.zeros((), dtype=torch.float32, device=dev)
    partial = torch.where(flags[0], nan, zero).expand(R, H).clone()
    if expert_out.shape[0]:
        for j in range(k):
            p = ent_pos[:, j]
            g = expert_out.index_select(0, p.clamp(min=0)).float()
            partial += torch.where((p >= 0).unsqueeze(1), g * recv_w[:, j:j + 1], 0.0)
    back = torch.empty(cap_send, H, dtype=expert_out.dtype, device=dev)
    a2av(comm, back, partial.to(expert_out.dtype), send_counts, recv_counts)
    out = torch.where(flags[1], nan, zero).expand(T, H).clone()
    if cap_send:
        for j in range(k):
            c = comb_idx[:, j]
            g = back.index_select(0, c.clamp(min=0)).float()
            out += torch.where((c >= 0).unsqueeze(1), g, 0.0)
    return out.to(expert_out.dtype)
