"""The Triton backend: exact tile-skipping attention, forward and backward.

It runs on CUDA GPUs, and on the CPU under ``TRITON_INTERPRET=1`` (how CI tests it). Rows are
read and written through the layout's orders, so gather, attend and scatter are one kernel.
TopKFeatures runs as dense tiles over the sparsified q~ and k~ (formed in torch, so autograd
masks the gradients). Without triton installed the backend reports a reason, never an import
error.
"""

from __future__ import annotations

import importlib.util

import torch
from torch import Tensor

from ...ir import AttentionInputs, DotScore, HeadGroup, PreparedGroup, Program
from ..base import Backend, register
from ..reference import feature_mask

__all__ = ["TritonBackend"]

_HAVE_TRITON = importlib.util.find_spec("triton") is not None


class TritonBackend(Backend):
    """Tile-skipping sparse flash attention in Triton."""

    NAME = "triton"
    SUPPORTED_DEVICES = ("cuda", "cpu")
    STAGES = ("layout", "ranges", "gather", "attend", "scatter")
    # the index kernels build layout and ranges together (sort keys, one sort, one block pass
    # per side); the attention kernels read and write rows through the layout's order
    FUSIONS = (("layout", "ranges"), ("gather", "attend", "scatter"))

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        if not _HAVE_TRITON:
            return ["triton is not installed (pip install 'triton>=3.6,<3.7')"]
        from .op import interpreting

        reasons = []
        if inputs.device.type == "cpu" and not interpreting():
            reasons.append("inputs are on the CPU: triton runs on CUDA, or on the CPU under TRITON_INTERPRET=1")
        if inputs.device.type == "cuda" and torch.cuda.get_device_capability(inputs.device) < (8, 0):
            cap = torch.cuda.get_device_capability(inputs.device)
            reasons.append(f"GPU compute capability {cap} < (8, 0)")
        from .index import index_build_reasons

        return reasons + index_build_reasons(group, inputs.seqlen)

    def blocks(self, inputs: AttentionInputs) -> tuple[int, int]:
        from .op import tile_config

        cfg = tile_config(inputs.head_dim, inputs.dtype, inputs.device)
        return cfg.block_q, cfg.block_k

    def prepare(self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs) -> PreparedGroup:
        """Layout and ranges in four launches (index.py) instead of the IR's torch ops; with
        queries shorter than keys (Tq < Tk), the IR's torch ops (the fused build takes one
        length for both sides)."""
        from .index import build_group

        if inputs.q_len != inputs.k_len:
            return super().prepare(program, group, heads, decisions, inputs)
        return build_group(
            program, group, heads, decisions,
            batch=inputs.batch, n_heads=inputs.heads, seqlen=inputs.seqlen, device=inputs.device,
        )  # fmt: skip

    def input_copies(self, inputs: AttentionInputs) -> list[str]:
        strided = [n for n, t in (("q", inputs.q), ("k", inputs.k), ("v", inputs.v)) if t.stride(-1) != 1]
        return [f"{n} (the kernels need unit stride along D; other strides are read in place)" for n in strided]

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        from .interpreter import patch_bf16_dot
        from .op import interpreting, sparse_attention, tile_config

        if interpreting():
            patch_bf16_dot()
        q, k, v = (_last_dim_contiguous(t) for t in (inputs.q, inputs.k, inputs.v))
        cfg = tile_config(inputs.head_dim, inputs.dtype, inputs.device)
        if cfg.block_q != g.block_q or cfg.block_k != g.block_k:
            raise ValueError(
                f"prepared for blocks ({g.block_q}, {g.block_k}) but the triton config uses "
                f"({cfg.block_q}, {cfg.block_k}); prepare with backend.blocks(inputs)"
            )
        if not isinstance(g.group.score, DotScore):
            q, k = _sparsify(q, k, g, inputs)
        return sparse_attention(q, k, v, g, inputs.scale, cfg)


def _last_dim_contiguous(t: Tensor) -> Tensor:
    """Kernels index rows with any strides but need unit stride along D."""
    return t if t.stride(-1) == 1 else t.contiguous()


def _sparsify(q: Tensor, k: Tensor, g: PreparedGroup, inputs: AttentionInputs) -> tuple[Tensor, Tensor]:
    """q~ and k~ (per query head) with the unkept features zeroed; other heads pass as they are."""
    heads = list(g.heads)
    D = inputs.head_dim
    fq = torch.ones_like(q)
    fq[:, heads] = feature_mask(g.q_support, D, q.dtype)
    k_per_head = k.repeat_interleave(inputs.group, dim=1) if inputs.group > 1 else k
    fk = torch.ones_like(k_per_head)
    fk[:, heads] = feature_mask(g.k_support, D, k.dtype)
    return q * fq, k_per_head * fk


register(TritonBackend())
