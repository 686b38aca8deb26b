"""What an index builder needs to hash the built-in ``lsh`` criterion's buckets itself.

The criterion draws its rotation (``tilesparse.patterns.criteria.lsh_draw``); when the
plan gives the hashing to an index builder (alone, or fused into the first launch of its
build), the decide step hands the builder this request instead of hashing with torch ops. The
buffers are the ones the call's decisions hold, so every later reader sees the builder's
buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

__all__ = ["LshHash"]


@dataclass(frozen=True, eq=False)
class LshHash:
    """Hash every head of the inputs into ``buckets`` with ``rotations`` ((H, D,
    ceil(buckets / 2)) float32, the criterion's draw before its rounding: the hasher rounds
    each value to the inputs' dtype, to nearest with ties to even, as the criterion's
    ``lsh_rotation`` does), writing the (B, H, T) int32 buffers ``q_bucket`` and ``k_bucket``."""

    rotations: Tensor
    buckets: int
    q_bucket: Tensor
    k_bucket: Tensor
