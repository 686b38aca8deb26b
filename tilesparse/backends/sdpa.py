"""Dense head groups through ``torch.nn.functional.scaled_dot_product_attention``.

A group qualifies when nothing but causality masks it: identity layout, at most a non-strict
Causal predicate, the plain dot score. On CUDA the cuDNN kernel is tried first, then flash,
then torch's others: on the H200 cuDNN runs dense causal attention 1.6x faster than flash
(benchmarks/results/bench_full_d64_h200.json), and torch's own order may prefer flash.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..ir import AttentionInputs, Causal, DotScore, HeadGroup, Layout, PreparedGroup
from .base import Backend, register, select_heads
from .reference import kv_for_heads

__all__ = ["SdpaBackend"]

# on CUDA: cuDNN first; torch skips a backend that cannot take the inputs
CUDA_PRIORITY = [
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]


class SdpaBackend(Backend):
    """torch's fused dense attention for groups that only causality masks."""

    NAME = "sdpa"

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        reasons = []
        if group.layout is not Layout.IDENTITY:
            reasons.append(f"layout {group.layout.value} is not identity: sdpa cannot skip or reorder rows")
        other = [p for p in group.predicates if not (isinstance(p, Causal) and not p.strict)]
        if other:
            reasons.append(f"mask has predicates {other} beyond non-strict causality")
        if not isinstance(group.score, DotScore):
            reasons.append("score is a feature-sparse dot; sdpa computes full dots")
        return reasons

    @property
    def needs_prepare(self) -> bool:
        return False

    def input_copies(self, inputs: AttentionInputs) -> list[str]:
        strided = [n for n, t in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)) if t.stride(-1) != 1]
        return [f"{n} (last dim strided; torch's fused kernels copy it)" for n in strided]

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        return self.attend_heads(g.group, g.heads, inputs)

    def attend_heads(self, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs) -> Tensor:
        """The group's output without index tensors (sdpa needs none)."""
        q = select_heads(inputs.q, heads, inputs.heads)
        k, v = kv_for_heads(inputs, heads)
        gqa = q.shape[1] != k.shape[1]
        if q.is_cuda:
            with sdpa_kernel(CUDA_PRIORITY, set_priority=True):
                return F.scaled_dot_product_attention(
                    q, k, v, is_causal=group.causal is not None, scale=inputs.scale, enable_gqa=gqa
                )
        return F.scaled_dot_product_attention(q, k, v, is_causal=group.causal is not None, scale=inputs.scale, enable_gqa=gqa)


register(SdpaBackend())
