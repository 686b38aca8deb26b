"""The Triton index builder: layout and ranges in three or four launches (``index.py``) instead of the
IR's torch ops; on CUDA it also hashes the ``lsh`` criterion's buckets in one launch of its own
(``hashing.py``), ahead of the CuPy builder (``HASH_RANK``)."""

from __future__ import annotations

from collections.abc import Callable

from ...ir import AttentionInputs, HeadGroup, PreparedGroup, Program
from ...ir.hashing import LshHash
from ..builder import BUILDERS, HashingBuilder
from .availability import HAVE_TRITON, triton_reasons

__all__ = ["TritonBuilder"]


class TritonBuilder(HashingBuilder):
    """A counting sort by bucket and one block pass per side, in Triton kernels. With queries
    shorter than keys (Tq < Tk) it builds with the IR's torch ops: the kernels take one length
    for both sides."""

    NAME = "triton"
    HASHES = "in a launch of its own, before its build"
    # ahead of CuPy's hashing: its kernel took 0.044-0.17 ms where CuPy's took 0.24-0.53 and
    # torch's ops 0.20-1.88, every shape measured (benchmarks/results/probe_lsh_h200.json)
    HASH_RANK = 0
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
        return build_group(program, group, heads, decisions, inputs)

    def bind(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs,
        dense_heads: tuple[int, ...] = (),
    ) -> Callable:
        """:meth:`build` with the buffer layout, grids and constants of ``inputs``' sizes worked
        out once; ``dense_heads`` built by the sort's launch itself (``index.bind_group``)."""
        from .index import bind_group

        if inputs.q_len != inputs.k_len:
            if dense_heads:
                raise ValueError("dense_heads: the torch build of queries shorter than keys takes none")
            return BUILDERS["torch"].bind(program, group, heads, inputs)
        return bind_group(program, group, heads, inputs, dense_heads)

    def binds_dense_heads(self, inputs: AttentionInputs) -> bool:
        return inputs.q_len == inputs.k_len

    def hash_reasons(self, inputs: AttentionInputs, buckets: int) -> list[str]:
        reasons = triton_reasons(inputs)
        if not HAVE_TRITON:
            return reasons
        from .hashing import lsh_hash_reasons
        from .op import interpreting

        reasons += lsh_hash_reasons(inputs.device.type, inputs.head_dim, buckets, interpreting())
        if inputs.q_len != inputs.k_len:
            reasons.append(f"queries shorter than keys ({inputs.q_len} < {inputs.k_len}): the kernel takes one length")
        return reasons

    def hash(self, inputs: AttentionInputs, lsh: LshHash) -> None:
        """One launch: every head's buckets, both sides."""
        from .hashing import hash_into

        hash_into(inputs.q, inputs.k, lsh.rotations, lsh.buckets, lsh.q_bucket, lsh.k_bucket)

    def build_hashing(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs, lsh: LshHash
    ) -> PreparedGroup:
        """The hashing launch, then :meth:`build` (its sort reads the buckets just written)."""
        self.hash(inputs, lsh)
        return self.build(program, group, heads, decisions, inputs)

    def bind_hashing(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs
    ) -> Callable:
        """The hashing launch, bound to ``inputs``' sizes (:class:`~.hashing.BoundHash`, one per
        bucket count), then the bound :meth:`build` (:meth:`bind`: its lent buffers)."""
        from .hashing import BoundHash

        build = self.bind(program, group, heads, inputs)
        hashes: dict[int, BoundHash] = {}

        def build_hashing(decisions, inputs: AttentionInputs, lsh: LshHash) -> PreparedGroup:
            hash_ = hashes.get(lsh.buckets)
            if hash_ is None:
                hash_ = hashes[lsh.buckets] = BoundHash(inputs.q, inputs.k, lsh.buckets)
            hash_(inputs.q, inputs.k, lsh.rotations, lsh.q_bucket, lsh.k_bucket)
            return build(decisions, inputs)

        return build_hashing
