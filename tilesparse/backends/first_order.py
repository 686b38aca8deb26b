"""Gradients that refuse to be differentiated again: the kernels' backward passes are first
order only.

A backward pass run with ``create_graph=True`` records a graph over its outputs. A backend
whose backward is hand-written (the tile executor, Triton, CuPy) computes its gradients from
saved statistics (the log-sum-exp, delta) that autograd does not see, so a second derivative
through them would be silently wrong. :func:`first_order_only` passes the gradients through a
node whose backward raises a clear ``RuntimeError`` instead (as SDPA's fused kernels do); the
reference backend is plain torch and differentiates twice exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["first_order_only"]


def first_order_only(backend: str, grads: tuple, inputs: tuple[Tensor, ...]) -> tuple:
    """``grads`` (Tensors or None) as they are, unless the backward pass records a graph
    (``create_graph=True``): then through a node that refuses a second backward."""
    if not torch.is_grad_enabled():
        return grads
    live = [t for t in inputs if isinstance(t, Tensor) and t.requires_grad]
    tensors = [g for g in grads if isinstance(g, Tensor)]
    if not tensors:
        return grads
    guarded = iter(_Refuse.apply(backend, len(tensors), *tensors, *live)[: len(tensors)])
    return tuple(next(guarded) if isinstance(g, Tensor) else g for g in grads)


class _Refuse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, backend: str, n: int, *tensors: Tensor):
        ctx.backend = backend
        # copies: the gradients leave here as outputs of this node, q, k, v its inputs
        return tuple(t.detach().clone() for t in tensors[:n]) + tuple(t.detach() for t in tensors[n:])

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(
            f"tilesparse: the {ctx.backend!r} backend's backward pass is first order only; a second "
            "derivative (differentiating gradients taken with create_graph=True) is not supported. "
            "compile the op with backend='reference' for exact second derivatives"
        )
