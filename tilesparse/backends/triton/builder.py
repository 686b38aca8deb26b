"""The Triton index builder: layout and ranges in three or four launches (``index.py``) instead of the
IR's torch ops."""

from __future__ import annotations

from ...ir import AttentionInputs, HeadGroup, PreparedGroup, Program
from ..builder import BUILDERS, IndexBuilder
from .availability import HAVE_TRITON, triton_reasons

__all__ = ["TritonBuilder"]


class TritonBuilder(IndexBuilder):
    """A counting sort by bucket and one block pass per side, in Triton kernels. With queries
    shorter than keys (Tq < Tk) it builds with the IR's torch ops: the kernels take one length
    for both sides."""

    NAME = "triton"
    SUPPORTED_DEVICES = ("cuda", "cpu")
    # sort keys, one sort and one block pass per side: layout and ranges together
    FUSIONS = (("layout", "ranges"),)

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        if not HAVE_TRITON:
            return triton_reasons(inputs)
        from .index import index_build_reasons

        return triton_reasons(inputs) + index_build_reasons(group, inputs.seqlen)

    def build(self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs) -> PreparedGroup:
        from .index import build_group

        if inputs.q_len != inputs.k_len:
            return BUILDERS["torch"].build(program, group, heads, decisions, inputs)
        return build_group(
            program, group, heads, decisions,
            batch=inputs.batch, n_heads=inputs.heads, seqlen=inputs.seqlen, device=inputs.device,
        )  # fmt: skip
