"""Sizes shared by the CUDA kernels and their torch model: tile shapes, the compressed-key
format, shared memory per kernel, predicate bits. Must match ``kernels/sfa.cu`` (a CPU test
reads the constants back from the source).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...ir import HeadGroup, NotSelf, SameBucket

__all__ = ["BM", "BN", "NT", "CompressedKeys", "compressed_key_bytes", "predicate_bits", "shared_bytes"]

BM = 64  # query rows per block (forward, dQ) and per query tile (dK/dV)
BN = 64  # key rows per tile, and per key block of the dK/dV kernel
NT = 256  # threads per program: four lanes per row

P_CAUSAL, P_STRICT, P_SAME_BUCKET, P_NOT_SELF = 1, 2, 4, 8


def predicate_bits(group: HeadGroup) -> int:
    """The group's predicates as the kernels' ``flags`` bit set."""
    causal = group.causal
    bits = 0
    if causal is not None:
        bits |= P_CAUSAL | (P_STRICT if causal.strict else 0)
    if group.has(SameBucket):
        bits |= P_SAME_BUCKET
    if group.has(NotSelf):
        bits |= P_NOT_SELF
    return bits


@dataclass(frozen=True, eq=False)
class CompressedKeys:
    """Keys of one group, feature-major per key tile of ``BN`` layout rows (CSC).

    ============ =============================== ============================================
    ptr          (B*Hg, n_tiles, D + 1) int16     column f of tile n is entries [ptr[f], ptr[f+1])
    row          (B*Hg, n_tiles, BN * k) int16    key row within the tile (increasing in a column)
    val          (B*Hg, n_tiles, BN * k) dtype    the key's value at feature f
    ============ =============================== ============================================

    A tile of r rows holds exactly r * k entries (every key keeps k features).
    """

    ptr: torch.Tensor
    row: torch.Tensor
    val: torch.Tensor

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.ptr, self.row, self.val))


def compressed_key_bytes(k: int, head_dim: int, dtype: torch.dtype) -> dict[str, float]:
    """Bytes per key token: dense K, the compressed form (16-bit ids + values + the tile's
    column pointers spread over its BN keys) and their ratio."""
    elem = torch.empty((), dtype=dtype).element_size()
    dense = head_dim * elem
    compressed = k * (2 + elem) + 2 * (head_dim + 1) / BN
    return {"dense": float(dense), "compressed": compressed, "ratio": dense / compressed}


def shared_bytes(kernel: str, head_dim: int, k: int) -> int:
    """Dynamic shared memory of one program of ``kernel`` (layouts in ``kernels/sfa.cu``)."""
    hdp, sp = head_dim + 1, BN + 1
    if kernel == "compress":
        floats, ints, shorts = 0, head_dim + 1, BN * k
    elif kernel == "fwd":
        floats = BN * hdp + BM * sp + BN * k + BM * k
        ints, shorts = head_dim + 1 + 3 * BN, BN * k + BM * k  # ptr, pos, bkt, bad
    elif kernel == "dq":
        floats = BN * hdp + BM * hdp + BM * sp + BN * k + 2 * BM * k
        ints, shorts = head_dim + 1 + 2 * BN, BN * k + BM * k
    elif kernel == "dkdv":
        floats = BN * hdp + BM * hdp + 2 * BM * sp + 2 * BN * k + BM * k + 2 * BM
        ints, shorts = head_dim + 1 + 2 * BN + 2 * BM, 2 * BN * k + BM * k
    else:
        raise ValueError(f"unknown kernel {kernel!r}; one of compress, fwd, dq, dkdv")
    return 4 * (floats + ints) + 2 * shorts
