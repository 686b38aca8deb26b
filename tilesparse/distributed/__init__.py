"""Sequence parallelism over ``torch.distributed``: :class:`SequenceParallel` runs a compiled op
head-parallel (one all-to-all in, one out) on a group whose ranks hold sequence shards.

``import tilesparse`` does not import this package; ``torch.distributed`` is touched only when a
:class:`SequenceParallel` is built or called.
"""

from .broadcast import broadcast_decisions
from .heads import HeadSplit, split_heads
from .sequence_parallel import SequenceParallel, local_spec, resolve_group

__all__ = ["HeadSplit", "SequenceParallel", "broadcast_decisions", "local_spec", "resolve_group", "split_heads"]
