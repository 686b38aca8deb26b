"""The Triton backend: exact tile-skipping attention, forward and backward, and the Triton
index builder (``builder.py``: layout and ranges in kernels, for any backend's groups).

It runs on CUDA GPUs, and on the CPU under ``TRITON_INTERPRET=1`` (how CI tests it). Rows are
read and written through the layout's orders, so gather, attend and scatter are one kernel.
TopKFeatures runs as dense tiles over the sparsified q~ and k~ (``features.py``: one launch a
side, and one a side for their gradients, bound to the call signature). Without triton
installed the backend reports a reason, never an import error.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from ...ir import AttentionInputs, DotScore, HeadGroup, PreparedGroup
from ..base import Backend, register
from ..builder import register_builder
from .availability import device_reasons, triton_reasons
from .builder import TritonBuilder

__all__ = ["TritonBackend", "TritonBuilder", "id_check", "topk_selector"]


def id_check(device: torch.device):
    """The one-launch check of a call's given ids, their ranges and a support's repeats
    (``idcheck.ID_CHECK``, :class:`tilesparse.patterns.decision_errors.IdCheck`) where Triton
    kernels run on ``device``; None elsewhere (torch ops check them)."""
    if device_reasons(device):
        return None
    from .idcheck import ID_CHECK

    return ID_CHECK


def topk_selector(inputs: AttentionInputs):
    """The one-launch ``topk_abs`` criterion (``topk.topk_abs_into``) where it should select a
    call's feature supports (CUDA); None elsewhere (the criterion's torch ops select). On the
    fake tensors of a ``torch.compile`` trace it selects nothing (they have no memory) and
    leaves the supports as the caller allocated them: the layout the kernel fills, which the
    compiled graph then expects (the torch ops' sort may give other strides)."""
    if device_reasons(inputs.device):
        return None
    from .topk import topk_abs_into, topk_abs_reasons

    if topk_abs_reasons(inputs.device.type, inputs.head_dim):
        return None
    return _layout_only if is_fake(inputs.q) else topk_abs_into


def _layout_only(q: Tensor, k: Tensor, n: int, q_support: Tensor, k_support: Tensor) -> None:
    """``topk_abs_into`` on fake tensors: the outputs' shapes and strides are already the kernel's."""


class TritonBackend(Backend):
    """Tile-skipping sparse flash attention in Triton."""

    NAME = "triton"
    SUPPORTED_DEVICES = ("cuda", "cpu")
    STAGES = ("gather", "attend", "scatter")
    # the attention kernels read and write rows through the layout's order
    FUSIONS = (("gather", "attend", "scatter"),)
    INDEX_BUILDER = "triton"
    FOLDS_POISON = True  # into the forward's stored O and lse (kernels._poisoned)

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        return triton_reasons(inputs)

    def blocks(self, inputs: AttentionInputs) -> tuple[int, int]:
        from .op import tile_config

        cfg = tile_config(inputs.head_dim, inputs.dtype, inputs.device)
        return cfg.block_q, cfg.block_k

    def input_copies(self, inputs: AttentionInputs) -> list[str]:
        strided = [n for n, t in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)) if t.stride(-1) != 1]
        return [f"{n} (the kernels need unit stride along D; other strides are read in place)" for n in strided]

    def kernel_notes(self, inputs: AttentionInputs) -> list[str]:
        from .op import tile_config, ws_dkdv_reason, ws_dq_reason, ws_fwd_reason

        cfg = tile_config(inputs.head_dim, inputs.dtype, inputs.device)
        notes = []
        for name, module, rows, reason in (("forward", "gluon_fwd", cfg.ws_fwd, ws_fwd_reason(inputs.q, cfg)),
                                           ("dQ", "gluon_dq", cfg.ws_dq, ws_dq_reason(inputs.q, cfg)),
                                           ("dK/dV", "gluon_dkdv", cfg.ws_dkdv, ws_dkdv_reason(inputs.q, cfg))):
            if reason is None:
                notes.append(f"triton {name}: the warp-specialized Gluon kernel ({module}.py; in a group with buckets "
                             f"where its segments hold {rows} rows or more on average)")
            else:
                notes.append(f"triton {name}: the Triton kernel (the warp-specialized one does not run: {reason})")
        return notes

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        return self.bind(g.group, g.heads, inputs)(g, inputs)

    def bind(
        self, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs, *, dense_heads: tuple[int, ...] = ()
    ) -> Callable:
        """:meth:`attend` of ``group`` for calls with the signature of ``inputs``: the tile
        configuration and the launches' constants are worked out once
        (:class:`~tilesparse.backends.triton.op.BoundAttention`; with ``dense_heads`` fused in,
        the one whose blocks may split, ``TileConfig.fwd_split``), and a feature group's q~ and k~
        launches (:class:`~tilesparse.backends.triton.features.BoundFeatures`)."""
        from .features import BoundFeatures
        from .interpreter import patch_bf16_dot
        from .op import BoundAttention, interpreting

        if interpreting():
            patch_bf16_dot()
        bound = BoundAttention(group, inputs.head_dim, inputs.dtype, inputs.device, mixed=bool(dense_heads))
        # q~ and k~ with the group's unkept features zeroed, other heads as they are (features.py)
        features = None if isinstance(group.score, DotScore) else BoundFeatures(heads, inputs.q, inputs.k)

        def attend(g: PreparedGroup, inputs: AttentionInputs, poison: Tensor | None = None) -> Tensor:
            q, k, v = inputs.q, inputs.k, inputs.v
            if q.stride(-1) != 1 or k.stride(-1) != 1 or v.stride(-1) != 1:
                q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
            if features is not None:
                q, k = features(q, k, g)
            return bound(q, k, v, g, inputs.scale, poison)

        return attend


def _last_dim_contiguous(t: Tensor) -> Tensor:
    """Kernels index rows with any strides but need unit stride along D."""
    return t if t.stride(-1) == 1 else t.contiguous()


register(TritonBackend())
register_builder(TritonBuilder())
