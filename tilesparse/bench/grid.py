"""The benchmark's patterns and grids: what is timed, at which sizes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import tilesparse as ts

__all__ = [
    "DEFAULT_PATTERNS", "DTYPE", "FLEX_DEFAULT_D", "FLEX_DEFAULT_MAX_T", "FLEX_DEFAULT_PATTERNS", "GRIDS", "Grid",
    "LONG_D", "LONG_PATTERN", "LONG_T", "MODES", "PATTERNS", "Pattern",
]  # fmt: skip

DTYPE = torch.bfloat16
MODES = ("fwd", "fwd_bwd")


@dataclass(frozen=True)
class Pattern:
    """A benchmarked spec; ``backend`` None means the device's sparse backend (triton)."""

    spec: ts.Spec
    backend: str | None = None


PATTERNS: dict[str, Pattern] = {
    "dense": Pattern(ts.Dense(), backend="auto"),
    "keep0.7": Pattern(ts.QKDrop(keep=0.7)),
    "keep0.5": Pattern(ts.QKDrop(keep=0.5)),
    "keep0.3": Pattern(ts.QKDrop(keep=0.3)),
    "hash8": Pattern(ts.Hash(buckets=8)),
    "hash16": Pattern(ts.Hash(buckets=16)),
    "hash64": Pattern(ts.Hash(buckets=64)),
    "hybrid": Pattern(ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])),
    # not in any grid: the Triton kernels on the dense pattern (what auto sends to SDPA), a
    # PerHead spec and top-k feature sparsity (the model-shape benchmark and the host probe)
    "dense-triton": Pattern(ts.Dense(), backend="triton"),
    "perhead": Pattern(ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16))),
    "topk8": Pattern(ts.TopKFeatures(k=8)),
}
DEFAULT_PATTERNS = ("dense", "keep0.7", "keep0.5", "keep0.3", "hash8", "hash16", "hash64", "hybrid")
FLEX_DEFAULT_PATTERNS = ("hash16", "keep0.5", "hybrid")
FLEX_DEFAULT_D, FLEX_DEFAULT_MAX_T = 64, 32768


@dataclass(frozen=True)
class Grid:
    """The sizes and patterns of one benchmark grid; ``long_row`` adds T=131072 (Hash 16, D=64,
    forward+backward, ours against SDPA flash: time and peak memory); ``kv_heads`` (GQA: k and
    v have that many heads) is None for one kv head per query head."""

    batch: int
    heads: int
    head_dims: tuple[int, ...]
    seqlens: tuple[int, ...]
    patterns: tuple[str, ...]
    long_row: bool
    kv_heads: int | None = None


GRIDS: dict[str, Grid] = {
    "full": Grid(2, 12, (64, 128), (4096, 8192, 16384, 32768, 65536), DEFAULT_PATTERNS, True),
    "targets": Grid(2, 12, (64,), (16384, 32768), ("dense", "keep0.7", "keep0.5", "keep0.3", "hash16", "hybrid"), True),
    "quick": Grid(1, 2, (32,), (256, 512), DEFAULT_PATTERNS, False),
    # the shapes current models run (benchmarks/bench_models.py times them against cuDNN)
    "models": Grid(1, 32, (128,), (8192, 16384, 32768, 65536), DEFAULT_PATTERNS, False, kv_heads=8),
}
LONG_T, LONG_D, LONG_PATTERN = 131072, 64, "hash16"
