"""The CuPy index builder: layout and ranges in two launches (``kernels/index.cu``), and the
``lsh`` criterion's buckets hashed alone or inside the first of them."""

from __future__ import annotations

from ...ir import AttentionInputs, HeadGroup, PreparedGroup, Program
from ...ir.hashing import LshHash
from ..builder import HashingBuilder

__all__ = ["CupyBuilder"]


class CupyBuilder(HashingBuilder):
    """A per-head counting sort by bucket and the block ranges, CuPy RawKernels; the first
    launch hashes the ``lsh`` buckets when given the criterion's rotation."""

    NAME = "cupy"
    SUPPORTED_DEVICES = ("cuda",)
    STAGES = ("decide", "layout", "ranges")  # "decide": the lsh criterion's hashing only
    FUSIONS = (("decide", "layout", "ranges"), ("layout", "ranges"))

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        from . import _length_reasons, cupy_reasons
        from .index import MAX_BUCKETS

        reasons = cupy_reasons(inputs.device.type) + _length_reasons(inputs)
        if group.buckets > MAX_BUCKETS:
            reasons.append(f"the index build handles at most {MAX_BUCKETS} buckets, got {group.buckets}")
        return reasons

    def hash_reasons(self, inputs: AttentionInputs, buckets: int) -> list[str]:
        from . import _length_reasons
        from .index import hash_reasons

        if inputs.q_len != inputs.k_len:
            return _length_reasons(inputs)
        return hash_reasons(inputs.device.type, inputs.head_dim, buckets, inputs.batch * inputs.heads * inputs.seqlen)

    def hash(self, inputs: AttentionInputs, lsh: LshHash) -> None:
        """The first launch alone: every head's buckets."""
        from .index import hash_into

        hash_into(inputs.q, inputs.k, lsh.rotations, lsh.buckets, lsh.q_bucket, lsh.k_bucket)

    def build(self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs) -> PreparedGroup:
        from .index import build_group

        return build_group(program, group, heads, decisions, inputs)

    def build_hashing(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs, lsh: LshHash
    ) -> PreparedGroup:
        """The same two launches, the first hashing every head into ``lsh``'s buffers."""
        from .index import build_group

        return build_group(program, group, heads, decisions, inputs, rotations=lsh.rotations,
                           bucket_out=(lsh.q_bucket, lsh.k_bucket))  # fmt: skip
