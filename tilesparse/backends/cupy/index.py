"""The fused index-building stage (``kernels/index.cu``): LSH buckets (optional), a stable
per-head counting sort by bucket, and the block ranges: the tensors of
:func:`tilesparse.ir.prepare_group`, equal tensor for tensor, in four launches (three when the
buckets are given) and O(T) work per head, where the torch path sorts.

``build_group`` takes the same arguments as the Triton backend's, plus optional ``q``, ``k``
and ``rotations`` to hash in the kernel instead of reading ``dec``'s buckets;
:func:`lsh_rotations` draws the rotations exactly as the ``lsh`` criterion does, so with the
same generator the buckets agree with the criterion's up to the rounding of the projection
(cuBLAS and this kernel sum in different orders; near-ties may flip).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ...ir import HeadGroup, Keep, PreparedGroup, Program, SameBucket
from ...ir.prepare import _head_map, _select, assemble_group
from .compile import SHARED_LIMIT, module
from .layout import P_CAUSAL, P_NOT_SELF, P_STRICT, predicate_bits
from .op import _DTYPE_TAG, _arg

__all__ = ["CHUNK", "build_group", "lsh_buckets", "lsh_rotations"]

NT = 256
CHUNK = 1024  # tokens per program of the histogram and scatter kernels (index.cu)
MAX_BUCKETS = 4096  # the histograms live in shared memory
_INSTANCES = ("lsh_buckets<F32>", "lsh_buckets<F16>", "lsh_buckets<BF16>", "bucket_histogram", "bucket_scatter", "block_ranges")


def _launch(name: str, grid: tuple[int, int, int], block: int, smem: int, *args) -> None:
    import cupy

    fn = module("index.cu", _INSTANCES).get_function(name)
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    device = torch.cuda.current_device()
    with cupy.cuda.Device(device), cupy.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream):
        fn(grid, (block,), tuple(_arg(a) for a in args), shared_mem=smem)


def lsh_rotations(heads: int, head_dim: int, buckets: int, dtype: torch.dtype, device, generator=None) -> Tensor:
    """(H, D, ceil(buckets / 2)) float32 holding values of ``dtype``: the draw of the ``lsh``
    criterion (same generator calls), for :func:`lsh_buckets`."""
    half = math.ceil(buckets / 2)
    rot = torch.randn((heads, head_dim, half), generator=generator, device=device, dtype=torch.float32)
    return rot.to(dtype).float().contiguous()


def lsh_buckets(q: Tensor, k: Tensor, rotations: Tensor, heads: tuple[int, ...], buckets: int) -> tuple[Tensor, Tensor]:
    """(B, Hg, T) int32 buckets of q and k (k's kv head per query head) for query ``heads``."""
    B, H, T, D = q.shape
    Hg = len(heads)
    group = H // k.shape[1]
    qb = torch.empty((B, Hg, T), dtype=torch.int32, device=q.device)
    kb = torch.empty_like(qb)
    if buckets == 1:
        return qb.zero_(), kb.zero_()
    half = math.ceil(buckets / 2)
    if D * half * 4 > SHARED_LIMIT:
        raise ValueError(f"the rotation of {buckets} buckets at D={D} ({D * half * 4} bytes) does not fit in shared memory")
    q, k = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k))
    head_map = _head_map(tuple(heads), q.device)
    name = f"lsh_buckets<{_DTYPE_TAG[q.dtype]}>"
    _launch(
        name, (-(-T // NT), B * Hg, 2), NT, D * half * 4, q, k, rotations.contiguous(), head_map, qb, kb,
        *_i64(q.stride()[:3]), *_i64(k.stride()[:3]), T, Hg, group, D, half, buckets - half,
    )  # fmt: skip
    return qb, kb


def _i64(xs) -> tuple:
    return tuple(np.int64(x) for x in xs)


def build_group(
    program: Program,
    group: HeadGroup,
    heads: tuple[int, ...],
    dec,
    *,
    batch: int,
    n_heads: int,
    seqlen: int,
    device: torch.device,
    q: Tensor | None = None,
    k: Tensor | None = None,
    rotations: Tensor | None = None,
) -> PreparedGroup:
    """:func:`tilesparse.ir.prepare_group` computed by the kernels; with ``rotations`` (and q,
    k) the buckets are hashed here instead of read from ``dec``."""
    B, T, Hg = batch, seqlen, len(heads)
    has_bucket = group.has(SameBucket)
    has_keep = group.has(Keep)
    n_buckets = group.buckets if has_bucket else 1
    if n_buckets > MAX_BUCKETS:
        raise ValueError(f"the fused index build handles at most {MAX_BUCKETS} buckets, got {n_buckets}")
    big = (n_buckets + 1) * T
    if big + T >= 2**31:
        raise ValueError(f"(buckets + 1) * T + T = {big + T} overflows int32 sort keys")
    sel = lambda t: None if t is None else _select(t, heads, n_heads)  # noqa: E731
    i32 = dict(dtype=torch.int32, device=device)
    if has_bucket and rotations is not None:
        qb, kb = lsh_buckets(q, k, rotations, heads, n_buckets)
    elif has_bucket:
        qb, kb = (sel(t).to(torch.int32).contiguous() for t in (dec.q_bucket, dec.k_bucket))
    else:
        qb = kb = torch.empty(1, **i32)
    if has_keep:
        qk, kk = (sel(t).to(torch.uint8).contiguous() for t in (dec.q_keep, dec.k_keep))
    else:
        qk = kk = torch.empty(1, dtype=torch.uint8, device=device)
    n_chunks = -(-T // CHUNK)
    n_bins = n_buckets + 1
    counts = torch.empty((2, B * Hg, n_chunks, n_bins), **i32)
    _launch("bucket_histogram", (n_chunks, B * Hg, 2), NT, n_bins * 4, qb, kb, qk, kk, counts,
            T, n_chunks, n_buckets, has_bucket, has_keep)  # fmt: skip
    order, pos, bkt, skey = (torch.empty((2, B, Hg, T), **i32) for _ in range(4))
    _launch("bucket_scatter", (n_chunks, B * Hg, 2), NT, 2 * n_bins * 4, qb, kb, qk, kk, counts,
            order, pos, bkt, skey, T, n_chunks, n_buckets, has_bucket, has_keep, big)  # fmt: skip
    flags = predicate_bits(group)
    sizes = []
    for block in (program.block_q, program.block_k):
        if block > NT:
            raise ValueError(f"block {block} > {NT} rows: block_ranges runs one thread per row")
        nb = -(-T // block)
        S = max(1, min(block, group.buckets))
        sizes.append((nb, S))
    (nqb, qs), (nkb, ks) = sizes
    q_ranges = torch.empty((B, Hg, nqb, qs, 4), **i32)
    k_ranges = torch.empty((B, Hg, nkb, ks, 4), **i32)
    q_nseg = torch.empty((B, Hg, nqb), **i32)
    k_nseg = torch.empty((B, Hg, nkb), **i32)
    _launch(
        "block_ranges", (max(nqb, nkb), B * Hg, 2), NT, 0, skey, q_ranges, q_nseg, k_ranges, k_nseg,
        T, program.block_q, program.block_k, qs, ks, big,
        bool(flags & P_CAUSAL), bool(flags & P_STRICT), bool(flags & P_NOT_SELF),
    )  # fmt: skip
    out = [(order[s], pos[s], bkt[s], ranges, nseg) for s, ranges, nseg in ((0, q_ranges, q_nseg), (1, k_ranges, k_nseg))]
    return assemble_group(program, group, heads, dec, n_heads, T, device, out[0], out[1])
