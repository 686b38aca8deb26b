"""Index builders: a head group's decisions become the IR's index tensors (``PreparedGroup``).

A builder runs the ``layout`` and ``ranges`` stages of a group for whichever attention backend
reads them; every builder returns the same tensors as :func:`tilesparse.ir.prepare_group`
(tested tensor for tensor), so the planner picks one by price alone. Three are registered:
``torch`` (the IR's torch code), ``triton`` (its kernels, ``triton/builder.py``)
and ``cupy`` (two launches, ``cupy/builder.py``). Like an attention backend, a builder states
what it cannot build in ``not_supported_reasons``.

A :class:`HashingBuilder` can also hash the built-in ``lsh`` criterion's buckets, given the
rotation the criterion drew (:class:`tilesparse.ir.hashing.LshHash`): alone (``hash``), or in
its build (``build_hashing``). :func:`lsh_hasher` names the builder that
hashes a call's ``lsh`` buckets, so the op's decisions and a fused build agree bucket for bucket.

Builders depend on the IR only; the planner reaches them through :data:`BUILDERS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from torch._subclasses.fake_tensor import is_fake

from ..ir import AttentionInputs, HeadGroup, PreparedGroup, Program, prepare_group
from ..ir.hashing import LshHash

__all__ = ["BUILDERS", "HashingBuilder", "IndexBuilder", "TorchBuilder", "lsh_hasher", "register_builder"]


class IndexBuilder(ABC):
    """A way to build the index tensors of a head group.

    ``STAGES`` are the stages it runs in kernels of its own (the stage graph labels the others
    ``torch``) and ``FUSIONS`` the chains of them it runs as one launch. ``OWN_ONLY`` keeps it
    to the attention backends that name it (``Backend.INDEX_BUILDER``): the planner offers the
    others to every backend that reads index tensors.
    """

    NAME: ClassVar[str]
    STAGES: ClassVar[tuple[str, ...]] = ("layout", "ranges")
    FUSIONS: ClassVar[tuple[tuple[str, ...], ...]] = ()
    SUPPORTED_DEVICES: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    OWN_ONLY: ClassVar[bool] = False

    def not_supported_reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        """Every reason this builder cannot build ``group`` on ``inputs``; empty when it can."""
        reasons = []
        if inputs.device.type not in self.SUPPORTED_DEVICES:
            reasons.append(f"device {inputs.device.type!r} not in {self.SUPPORTED_DEVICES}")
        return reasons + self._reasons(group, inputs)

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        return []

    @abstractmethod
    def build(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs
    ) -> PreparedGroup:
        """The index tensors of ``group``'s query ``heads`` under ``decisions``."""

    def bind(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs
    ) -> Callable[[object, AttentionInputs], PreparedGroup]:
        """:meth:`build` for every call with the signature of ``inputs`` (sizes, dtype, device):
        a builder works out here what those calls share (buffer layouts, grids, constants),
        once. By default :meth:`build` itself. A builder that :meth:`binds_dense_heads` also
        takes ``dense_heads=``: query heads among ``heads`` to build as if their decisions kept
        every token in bucket 0 (a PerHead's dense heads fused into the group), without the
        caller filling their decisions so first (``tilesparse.execute.with_dense_heads``)."""
        return lambda decisions, inputs: self.build(program, group, heads, decisions, inputs)

    def binds_dense_heads(self, inputs: AttentionInputs) -> bool:
        """Whether :meth:`bind` takes ``dense_heads=`` for calls of ``inputs``' signature."""
        return False

    def __repr__(self) -> str:
        return f"<index builder {self.NAME}>"


class HashingBuilder(IndexBuilder):
    """A builder that can also hash the ``lsh`` criterion's buckets in its own launches;
    ``HASHES`` says where its fused build hashes them (``explain()`` prints it)."""

    HASHES: ClassVar[str] = "in its first launch"
    # among the builders that should hash a call's buckets, the lowest rank hashes them
    HASH_RANK: ClassVar[int] = 1

    @abstractmethod
    def hash_reasons(self, inputs: AttentionInputs, buckets: int) -> list[str]:
        """Why it should not hash every head of ``inputs`` into ``buckets`` (empty when it
        should: where it is the faster hasher)."""

    @abstractmethod
    def hash(self, inputs: AttentionInputs, lsh: LshHash) -> None:
        """Fill ``lsh``'s bucket buffers."""

    @abstractmethod
    def build_hashing(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], decisions, inputs: AttentionInputs, lsh: LshHash
    ) -> PreparedGroup:
        """:meth:`build` that fills ``lsh``'s buffers (the buckets ``decisions`` holds) first,
        inside its own first launch."""

    def bind_hashing(
        self, program: Program, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs
    ) -> Callable[[object, AttentionInputs, LshHash], PreparedGroup]:
        """:meth:`build_hashing` for every call with the signature of ``inputs``, as :meth:`bind`
        is to :meth:`build`. By default :meth:`build_hashing` itself."""
        return lambda decisions, inputs, lsh: self.build_hashing(program, group, heads, decisions, inputs, lsh)


class TorchBuilder(IndexBuilder):
    """The IR's torch code (:func:`tilesparse.ir.prepare_group`): sorts and scans in torch ops.
    The torch backends' own builder, never offered to a kernel backend (slow on a GPU)."""

    NAME = "torch"
    STAGES = ()
    OWN_ONLY = True

    def build(self, program, group, heads, decisions, inputs: AttentionInputs) -> PreparedGroup:
        return prepare_group(
            program, group, heads, decisions,
            batch=inputs.batch, heads=inputs.heads, seqlen=inputs.seqlen, device=inputs.device, q_len=inputs.q_len,
        )  # fmt: skip


BUILDERS: dict[str, IndexBuilder] = {}


def register_builder(builder: IndexBuilder) -> IndexBuilder:
    """Add ``builder`` to :data:`BUILDERS` under its NAME."""
    BUILDERS[builder.NAME] = builder
    return builder


def lsh_hasher(inputs: AttentionInputs, buckets: int) -> HashingBuilder | None:
    """The builder that hashes a call's ``lsh`` buckets: of the registered ones that should, the
    lowest ``HASH_RANK`` (the first registered among equals), or None for the criterion's own
    torch ops (one bucket, queries shorter than keys, or the fake tensors of a
    ``torch.compile`` trace, which have no memory for a kernel)."""
    if buckets <= 1 or inputs.q_len != inputs.k_len or is_fake(inputs.q):
        return None
    hashers = sorted((b for b in BUILDERS.values() if isinstance(b, HashingBuilder)), key=lambda b: b.HASH_RANK)
    # the first that should, in rank order: the others' reasons are not worked out per call
    return next(
        (b for b in hashers if inputs.device.type in b.SUPPORTED_DEVICES and not b.hash_reasons(inputs, buckets)), None
    )


register_builder(TorchBuilder())
