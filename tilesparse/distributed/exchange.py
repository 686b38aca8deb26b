"""The two all-to-alls of head-parallel (Ulysses-style) sequence parallelism, differentiable.

:func:`sequence_to_heads` turns q (B, H, T/P, D), k, v (B, Hkv, T/P, D), sharded along the
sequence, into the rank's query heads and kv heads over the whole sequence, in ONE all-to-all
(q, k and v packed per destination); :func:`heads_to_sequence` sends an output (B, H/P, T, D)
back to sequence shards (B, H, T/P, D). Both run through :func:`all_to_all`, an autograd
function over ``torch.distributed.all_to_all_single`` whose backward is the same exchange of the
gradients, so gradients reach the shards' q, k, v (and a kv head sent to several ranks sums its copies'
gradients through the ``index_select`` that copies it). Shards are contiguous and of equal
length: rank r holds tokens [r*T/P, (r+1)*T/P). Tested on gloo (CPU) in CI, NCCL on the GPU.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .heads import HeadSplit

__all__ = ["all_to_all", "heads_to_sequence", "sequence_to_heads"]


def all_to_all(x: Tensor, group) -> Tensor:
    """x (P, ...): block p goes to rank p; returns (P, ...) whose block s came from rank s."""
    return _AllToAll.apply(x, group)


class _AllToAll(torch.autograd.Function):
    """An equal-block all-to-all whose backward is the same all-to-all of the gradient (block s
    of the output came from rank s, so its gradient goes back to rank s).

    A blocking c10d call (``async_op=False``): on NCCL the caller's stream waits for the
    exchange, so what follows reads finished data, forward and backward alike. (The functional
    collectives' autograd variant leaves its backward's results to be waited on first use and
    imports dynamo in every process; this is the plain collective.)
    """

    @staticmethod
    def forward(ctx, x: Tensor, group) -> Tensor:
        import torch.distributed as dist

        ctx.group = group
        x = x.contiguous()
        out = torch.empty_like(x)
        dist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        return _AllToAll.apply(grad.contiguous(), ctx.group), None


def sequence_to_heads(q: Tensor, k: Tensor, v: Tensor, split: HeadSplit, group) -> tuple[Tensor, Tensor, Tensor]:
    """Sequence shards in, (B, H/P, T, D) query heads and (B, n, T, D) kv heads of this rank out."""
    B, H, Ts, D = q.shape
    P, Hl, n = split.world, split.local_heads, split.local_kv_heads
    qs = q.reshape(B, P, Hl, Ts, D)
    order = [h for kv in split.kv_heads for h in kv]
    if order == list(range(k.shape[1])):  # every kv head to exactly one rank, in order: no copy
        ks, vs = k.reshape(B, P, n, Ts, D), v.reshape(B, P, n, Ts, D)
    else:
        idx = torch.tensor(order, device=k.device)
        ks = k.index_select(1, idx).view(B, P, n, Ts, D)
        vs = v.index_select(1, idx).view(B, P, n, Ts, D)
    packed = torch.cat([qs, ks, vs], dim=2).transpose(0, 1)  # (P, B, Hl + 2n, Ts, D): block p to rank p
    got = all_to_all(packed, group)  # block s: the tokens of rank s
    full = got.permute(1, 2, 0, 3, 4).reshape(B, Hl + 2 * n, P * Ts, D)
    return full[:, :Hl], full[:, Hl : Hl + n], full[:, Hl + n :]


def heads_to_sequence(out: Tensor, split: HeadSplit, group) -> Tensor:
    """This rank's (B, H/P, T, D) output in, its (B, H, T/P, D) sequence shard of every head out."""
    B, Hl, T, D = out.shape
    P = split.world
    packed = out.reshape(B, Hl, P, T // P, D).permute(2, 0, 1, 3, 4)  # block p: the tokens of rank p
    got = all_to_all(packed, group)  # block s: the heads of rank s
    return got.transpose(0, 1).reshape(B, P * Hl, T // P, D)
