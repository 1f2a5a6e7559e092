"""cclx::moe_dispatch and cclx::moe_combine as torch custom ops (functional: new outputs, no
input written), with fake implementations that give the output shapes from the input shapes,
the communicator's size and the integer arguments, so torch.compile traces them and CUDA graphs
capture them (every shape is fixed by T, k, H, E, N and the bound):

    torch.ops.cclx.moe_dispatch(comm, tokens, topk_ids, topk_weights, num_experts, fp8, bound)
        -> (expert_tokens [C, H], expert_counts [L], expert_offsets [L+1],
            send_counts [N], recv_counts [N], ent_pos [R, k], recv_w [R, k], flags [2],
            comb_idx [T, k])
    torch.ops.cclx.moe_combine(comm, expert_out, send_counts, recv_counts, ent_pos, recv_w,
                               flags, comb_idx, cap_send) -> [T, H]

comm is Comm.handle. R = N * bound, C = R * min(k, L), cap_send = T * min(N, k)."""
from __future__ import annotations

import torch

from .. import _fused_op
from ._layout import Layout
from ._route import combine_impl, dispatch_impl


def _lay(comm, tokens, topk_ids, num_experts, fp8, bound):
    return Layout(tokens.shape[0], tokens.shape[1], topk_ids.shape[1],
                  _fused_op.lookup(comm).get_size(), num_experts, bound, tokens.element_size(),
                  fp8)


@torch.library.custom_op(
    "cclx::moe_dispatch", mutates_args=(),
    schema="(int comm, Tensor tokens, Tensor topk_ids, Tensor topk_weights, int num_experts, "
           "bool fp8, int bound) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, "
           "Tensor, Tensor)")
def moe_dispatch(comm, tokens, topk_ids, topk_weights, num_experts, fp8, bound):
    return tuple(dispatch_impl(_fused_op.lookup(comm), tokens, topk_ids, topk_weights,
                               num_experts, fp8, bound))


@moe_dispatch.register_fake
def _(comm, tokens, topk_ids, topk_weights, num_experts, fp8, bound):
    lay = _lay(comm, tokens, topk_ids, num_experts, fp8, bound)
    dev, i64 = tokens.device, torch.int64
    return (tokens.new_empty(lay.cap_out, lay.H),
            torch.empty(lay.L, dtype=i64, device=dev),
            torch.empty(lay.L + 1, dtype=i64, device=dev),
            torch.empty(lay.N, dtype=i64, device=dev),
            torch.empty(lay.N, dtype=i64, device=dev),
            torch.empty(lay.cap_recv, lay.k, dtype=i64, device=dev),
            torch.empty(lay.cap_recv, lay.k, dtype=torch.float32, device=dev),
            torch.empty(2, dtype=torch.bool, device=dev),
            torch.empty(lay.T, lay.k, dtype=i64, device=dev))


@torch.library.custom_op(
    "cclx::moe_combine", mutates_args=(),
    schema="(int comm, Tensor expert_out, Tensor send_counts, Tensor recv_counts, "
           "Tensor ent_pos, Tensor recv_w, Tensor flags, Tensor comb_idx, int cap_send) "
           "-> Tensor")
def moe_combine(comm, expert_out, send_counts, recv_counts, ent_pos, recv_w, flags, comb_idx,
                cap_send):
    return combine_impl(_fused_op.lookup(comm), expert_out, send_counts, recv_counts, ent_pos,
                        recv_w, flags, comb_idx, cap_send)


@moe_combine.register_fake
def _(comm, expert_out, send_counts, recv_counts, ent_pos, recv_w, flags, comb_idx, cap_send):
    return expert_out.new_empty(comb_idx.shape[0], expert_out.shape[1])
