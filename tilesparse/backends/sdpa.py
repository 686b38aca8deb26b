"""Dense head groups through ``torch.nn.functional.scaled_dot_product_attention``.

A group qualifies when nothing but causality masks it: identity layout, at most a non-strict
Causal predicate. A TopKFeatures group runs as SDPA over the sparsified q~ and k~ (features
outside the supports zeroed, so autograd sends gradients to the kept entries only). A group of
every query head makes them with Triton's feature kernel where Triton runs (one launch for both
sides and one for their gradients, k repeated per query head in the same launch, an inf in an
unkept feature kept out as the reference keeps it: backends/triton/features.py); otherwise, and
for a group of some heads, as torch ops (a 0/1 mask a side and a product: there 0 * inf is NaN).
The kernel's launches are bound once per call signature (:meth:`SdpaBackend.bind_heads`:
``BoundFeatures``, sizes and grids worked out once, both sides under one autograd node), as the
Triton backend binds them.
On CUDA
the cuDNN kernel is tried first, then flash, then torch's others: on the H200 cuDNN runs dense
causal attention 1.6x faster than flash (benchmarks/results/bench_full_d64_h200.json), and
torch's own order may prefer flash. The call sets torch's priority order for itself and puts the
caller's back after it (two calls into torch's C API, and none where the order is already
cuDNN's first); the backends the caller turned off stay off. ``torch.nn.attention.sdpa_kernel``,
which did this before, also switched every listed backend on and read and restored each one's
flag, a dozen calls into torch's C API and Python's list handling around them
(``benchmarks/results/logs/sdpa_priority_host.py`` times both).

With queries shorter than keys (Tq < Tk) causality is bottom-right (query i at absolute position
Tk - Tq + i), while ``is_causal=True`` aligns top-left when Tq != Tk: such a call passes the
bottom-right mask explicitly (a (Tq, Tk) bool ``attn_mask``; none at all for Tq = 1, whose row
sees every key), so it stays exact.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend

from ..ir import AttentionInputs, Causal, DotScore, HeadGroup, Layout, PreparedGroup
from .base import Backend, register, select_heads
from .reference import feature_mask, kv_for_heads

__all__ = ["SdpaBackend", "bottom_right_causal"]

# on CUDA: cuDNN first; torch skips a backend that cannot take the inputs
CUDA_PRIORITY = [
    SDPBackend.CUDNN_ATTENTION,
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]
_FIRST = tuple(int(b) for b in CUDA_PRIORITY)


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
        return reasons

    @property
    def needs_prepare(self) -> bool:
        return False

    def input_copies(self, inputs: AttentionInputs) -> list[str]:
        strided = [n for n, t in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)) if t.stride(-1) != 1]
        return [f"{n} (last dim strided; torch's fused kernels copy it)" for n in strided]

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        return self._attend(g.group, g.heads, inputs, g.q_support, g.k_support)

    def attend_heads(
        self, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs, decisions=None, *, features=None
    ) -> Tensor:
        """The group's output without index tensors (sdpa needs none); a TopKFeatures group
        reads its feature supports from ``decisions`` (``features``: :meth:`bind_heads`' bound
        launches of q~ and k~)."""
        q_support = k_support = None
        if not isinstance(group.score, DotScore):
            if decisions is None or decisions.q_support is None or decisions.k_support is None:
                raise ValueError(
                    f"sdpa runs {group.describe()} over q~ and k~: pass decisions= with q_support and k_support"
                )
            q_support = select_heads(decisions.q_support, heads, inputs.heads)
            k_support = select_heads(decisions.k_support, heads, inputs.heads)
        return self._attend(group, heads, inputs, q_support, k_support, features)

    def bind_heads(self, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs):
        """:meth:`attend_heads` for the calls of one signature; a TopKFeatures group of every
        query head on a device Triton runs on makes q~ and k~ through
        :class:`~tilesparse.backends.triton.features.BoundFeatures`, sized and checked here
        once, both sides under one autograd node (:func:`_sparsified`)."""
        features = None
        every_head = heads == tuple(range(inputs.heads))
        if not isinstance(group.score, DotScore) and every_head and _triton_runs(inputs.device):
            from .triton.features import BoundFeatures

            features = BoundFeatures(heads, inputs.q, inputs.k)
        return functools.partial(self.attend_heads, group, heads, features=features)

    def _attend(self, group: HeadGroup, heads, inputs: AttentionInputs, q_support, k_support, features=None) -> Tensor:
        q = select_heads(inputs.q, heads, inputs.heads)
        if q_support is None:
            k, v = kv_for_heads(inputs, heads)
        else:
            # the dot of the sparsified vectors q~ . k~: per query head, as the supports are
            v = select_heads(inputs.v_per_query_head(), heads, inputs.heads)
            q, k = _sparsified(inputs, heads, q_support, k_support, features)
        gqa = q.shape[1] != k.shape[1]
        causal = group.causal is not None
        mask = None
        if causal and inputs.q_len != inputs.k_len:
            causal, mask = False, bottom_right_causal(inputs.q_len, inputs.k_len, q.device)
        attend = functools.partial(F.scaled_dot_product_attention, q, k, v, attn_mask=mask, is_causal=causal,
                                   scale=inputs.scale, enable_gqa=gqa)  # fmt: skip
        return cudnn_first(attend) if q.is_cuda else attend()


def cudnn_first(attend):
    """``attend()`` with torch's SDPA priority order :data:`CUDA_PRIORITY` first (then the
    caller's others, in its order), and the caller's order back after it."""
    previous = torch._C._get_sdp_priority_order()
    if tuple(previous[: len(_FIRST)]) == _FIRST:
        return attend()
    torch._C._set_sdp_priority_order([*_FIRST, *(b for b in previous if b not in _FIRST)])
    try:
        return attend()
    finally:
        torch._C._set_sdp_priority_order(previous)


def _sparsified(
    inputs: AttentionInputs, heads: tuple[int, ...], q_support: Tensor, k_support: Tensor, features=None
) -> tuple[Tensor, Tensor]:
    """q~ and k~ of the group's query heads ``heads``, k~ per query head (see the module
    docstring for which way they are made); ``features``: the signature's bound launches
    (``BoundFeatures``, made where the group holds every head on a device Triton runs on)."""
    q, k, H = inputs.q, inputs.k, inputs.heads
    whole = heads == tuple(range(H)) and q.stride(-1) == 1 and k.stride(-1) == 1
    if whole and (features is not None or _triton_runs(q.device)):
        q_support, k_support = (s if s.dtype == torch.int32 else s.to(torch.int32) for s in (q_support, k_support))
        if features is not None:
            return features.pair(q, k, q_support, k_support)
        from .triton.features import keep_features

        return keep_features(q, q_support, heads, H), keep_features(k, k_support, heads, H)
    D = inputs.head_dim
    q = select_heads(q, heads, H) * feature_mask(q_support, D, q.dtype)
    k = select_heads(inputs.k_per_query_head(), heads, H) * feature_mask(k_support, D, k.dtype)
    return q, k


def _triton_runs(device: torch.device) -> bool:
    """Whether Triton's feature kernel runs on ``device`` (q~ and k~ by kernel, not torch ops)."""
    from .triton.availability import device_reasons

    return not device_reasons(device)


def bottom_right_causal(q_len: int, k_len: int, device) -> Tensor | None:
    """(Tq, Tk) bool mask keeping key j for query i when j <= Tk - Tq + i; None for Tq = 1
    (the last position sees every key)."""
    if q_len == 1:
        return None
    i = torch.arange(q_len, device=device).view(q_len, 1)
    j = torch.arange(k_len, device=device).view(1, k_len)
    return j <= i + (k_len - q_len)


register(SdpaBackend())
