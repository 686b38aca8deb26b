"""The fused index-building stage (``kernels/index.cu``): LSH buckets (optional), a stable
per-head counting sort by bucket, and the block ranges: the tensors of
:func:`tilesparse.ir.prepare_group`, equal tensor for tensor, in two launches and O(T) work per
head, where the torch path sorts. The first launch counts each chunk's bins (hashing the
chunk's tokens first when it is given rotations), the second sorts and writes every block's
ranges from the two sides' histograms, with no wait for the other side's sort.

``build_group`` takes the same arguments as the Triton builder's, plus optional ``rotations``
to hash the inputs' q and k in the kernel instead of reading ``dec``'s buckets;
the rotations are the ``lsh`` criterion's draw (:func:`tilesparse.patterns.criteria.lsh_draw`),
which the kernel rounds to the inputs' dtype as the criterion does, so with the same generator
the buckets agree with the criterion's up to the rounding of the projection (cuBLAS and this
kernel sum in different orders; near-ties may flip).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ...ir import AttentionInputs, HeadGroup, Keep, PreparedGroup, Program, SameBucket, max_segments
from ...ir import device_constant
from ...ir.prepare import assemble_group, head_map, select_heads
from .compile import SHARED_LIMIT
from .layout import P_CAUSAL, P_NOT_SELF, P_STRICT, predicate_bits
from .op import _DTYPE_TAG, launch

__all__ = ["CHUNK", "build_group", "hash_into", "hash_reasons", "lsh_buckets"]

NT = 256
CHUNK = 1024  # tokens per program of the histogram and scatter kernels (index.cu)
COLS = 8  # threads per token in the LSH (index.cu)
TT = NT // COLS  # tokens per tile of the LSH
MAX_BUCKETS = 4096  # the histograms live in shared memory
# the projection work (B x H x T x D x ceil(buckets / 2)) up to which the kernel's LSH beats
# torch's matmul + argmax on the H200 (bench_index_h200.json: it wins at 0.13e9, both sides of
# B=1, H=8, T=16k, D=128, Hash 16, and loses at 0.54e9, T=64k)
LSH_MAX_WORK = 2**28
_INSTANCES = ("index_count<F32>", "index_count<F16>", "index_count<BF16>", "index_scatter")


def _launch(name: str, grid: tuple[int, int, int], block: int, smem: int, *args) -> None:
    launch("index.cu", _INSTANCES, name, grid, block, smem, args)


def lsh_buckets(q: Tensor, k: Tensor, rotations: Tensor, heads: tuple[int, ...], buckets: int) -> tuple[Tensor, Tensor]:
    """(B, Hg, T) int32 buckets of q and k (k's kv head per query head) for query ``heads``:
    the first launch of :func:`build_group` alone (its histograms are dropped)."""
    B, _, T, _ = q.shape
    qb = torch.empty((B, len(heads), T), dtype=torch.int32, device=q.device)
    kb = torch.empty_like(qb)
    _count(q, k, rotations, heads, qb, kb, None, None, buckets, True, B, T)
    return qb, kb


def hash_into(q: Tensor, k: Tensor, rotations: Tensor, buckets: int, q_bucket: Tensor, k_bucket: Tensor) -> None:
    """The CuPy builder's hashing alone (the op's ``lsh`` buckets on CUDA where it is faster):
    every head of q (B, H, T, D) and k (B, Hkv, T, D), into the (B, H, T) int32 buffers."""
    B, H, T, _ = q.shape
    _count(q, k, rotations, tuple(range(H)), q_bucket, k_bucket, None, None, buckets, True, B, T)


def hash_reasons(device_type: str, D: int, buckets: int, tokens: int) -> list[str]:
    """Why the kernel should not hash ``tokens`` (B x H x T) vectors of ``D`` features into
    ``buckets`` on ``device_type`` (empty when it should)."""
    from . import cupy_reasons

    reasons = cupy_reasons(device_type)
    work = tokens * D * math.ceil(buckets / 2)
    if work > LSH_MAX_WORK:
        reasons.append(
            f"{work:.3g} multiply-adds of projection > {LSH_MAX_WORK:.3g}: past that, torch's matmul (tensor "
            "cores, benchmarks/results/bench_index_h200.json) and Triton's hashing kernel hash faster than this one"
        )
    if _count_smem(buckets, D, hashing=True) > SHARED_LIMIT:
        reasons.append(f"the rotation of {buckets} buckets at D={D} does not fit in shared memory")
    if buckets > MAX_BUCKETS:
        reasons.append(f"the fused index build handles at most {MAX_BUCKETS} buckets, got {buckets}")
    return reasons


def _count_smem(n_buckets: int, D: int, *, hashing: bool) -> int:
    """Dynamic shared memory of ``index_count``: the bins, then the rotation's padded columns
    and a tile of tokens."""
    smem = 4 * (-(-(n_buckets + 1) // 4) * 4)
    return smem + (4 * (D * (-(-math.ceil(n_buckets / 2) // COLS) * COLS) + TT * (D + 1)) if hashing else 0)


def _count(q, k, rotations, heads, qb, kb, qk, kk, n_buckets: int, has_bucket: bool, B: int, T: int) -> Tensor:
    """The first launch: every chunk's histogram of bins (2, B * Hg, chunks, buckets + 1),
    hashing into ``qb``, ``kb`` first when ``rotations`` is given."""
    Hg = len(heads)
    device = qb.device
    n_chunks, n_bins = -(-T // CHUNK), n_buckets + 1
    counts = torch.empty((2, B * Hg, n_chunks, n_bins), dtype=torch.int32, device=device)
    none8 = _unused(device, torch.uint8)
    hash_ = rotations is not None and n_buckets > 1
    smem = _count_smem(n_buckets, q.shape[-1] if hash_ else 0, hashing=hash_)
    if hash_:
        D = q.shape[-1]
        half = math.ceil(n_buckets / 2)
        if smem > SHARED_LIMIT:
            raise ValueError(f"the rotation of {n_buckets} buckets at D={D} ({smem} bytes) does not fit in shared memory")
        q, k = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k))
        group, tag = q.shape[1] // k.shape[1], _DTYPE_TAG[q.dtype]
        xs = (q, k, rotations.contiguous(), head_map(tuple(heads), device))
        strides = (*_i64(q.stride()[:3]), *_i64(k.stride()[:3]))
        dims = (Hg, group, D, half, n_buckets - half)
    else:
        if rotations is not None:  # one bucket: every token in bucket 0
            qb.zero_(), kb.zero_()
        none = _unused(device, torch.float32)
        tag, xs, strides, dims = "F32", (none, none, none, none), _i64((0,) * 6), (Hg, 1, 0, 0, 0)
    has_keep = qk is not None
    _launch(
        f"index_count<{tag}>", (n_chunks, B * Hg, 2), NT, smem, *xs[:3], xs[3], qb, kb,
        qk if has_keep else none8, kk if has_keep else none8, counts, *strides, T, *dims,
        n_chunks, n_buckets, hash_, has_bucket, has_keep,
    )  # fmt: skip
    return counts


def _unused(device: torch.device, dtype: torch.dtype) -> Tensor:
    """A one-element stand-in for a pointer argument the kernel's flags leave unread (kept,
    outside any CUDA graph pool)."""
    return device_constant((0,), dtype, device)


def _bytes(t: Tensor) -> Tensor:
    t = t.contiguous()
    return t.view(torch.uint8) if t.dtype == torch.bool else t.to(torch.uint8)


def _i64(xs) -> tuple:
    return tuple(np.int64(x) for x in xs)


def build_group(
    program: Program,
    group: HeadGroup,
    heads: tuple[int, ...],
    dec,
    inputs: AttentionInputs,
    *,
    rotations: Tensor | None = None,
    bucket_out: tuple[Tensor, Tensor] | None = None,
) -> PreparedGroup:
    """:func:`tilesparse.ir.prepare_group` computed by the two kernels, at the sizes and on the
    device of ``inputs``; with ``rotations`` the buckets of the inputs' q and k are hashed in the
    first launch instead of read from ``dec``, into ``bucket_out`` ((B, Hg, T) int32 each) when
    given."""
    B, T, Hg, device = inputs.batch, inputs.seqlen, len(heads), inputs.device
    has_bucket = group.has(SameBucket)
    n_buckets = group.buckets if has_bucket else 1
    if n_buckets > MAX_BUCKETS:
        raise ValueError(f"the fused index build handles at most {MAX_BUCKETS} buckets, got {n_buckets}")
    sel = lambda t: None if t is None else select_heads(t, heads, inputs.heads)  # noqa: E731
    i32 = dict(dtype=torch.int32, device=device)
    hashing = has_bucket and rotations is not None
    if hashing:
        qb, kb = bucket_out if bucket_out is not None else (torch.empty((B, Hg, T), **i32) for _ in range(2))
        for name, t in zip(("q", "k"), (qb, kb), strict=True):
            if t.shape != (B, Hg, T) or t.dtype != torch.int32 or not t.is_contiguous():
                raise ValueError(f"bucket_out's {name} side must be a contiguous (B, Hg, T) = {(B, Hg, T)} int32 tensor")
    elif has_bucket:
        qb, kb = (sel(t).to(torch.int32).contiguous() for t in (dec.q_bucket, dec.k_bucket))
    else:
        qb = kb = _unused(torch.device(device), torch.int32)
    qk = kk = None
    if group.has(Keep):  # bool is one byte: read as uint8 without a copy
        qk, kk = (_bytes(sel(t)) for t in (dec.q_keep, dec.k_keep))
    counts = _count(inputs.q, inputs.k, rotations if hashing else None, heads, qb, kb, qk, kk, n_buckets, has_bucket,
                    B, T)
    blocks = (program.block_q, program.block_k)
    (nqb, qs), (nkb, ks) = ((-(-T // blk), max_segments(blk, group.buckets)) for blk in blocks)
    # every output is a view of one int32 buffer: one allocation per call
    shapes = ((3, 2, B, Hg, T), (B, Hg, nqb, qs, 4), (B, Hg, nkb, ks, 4), (B, Hg, nqb), (B, Hg, nkb))
    buf = torch.empty(sum(math.prod(sh) for sh in shapes), **i32)
    layout, q_ranges, k_ranges, q_nseg, k_nseg = (
        t.view(sh) for t, sh in zip(buf.split([math.prod(sh) for sh in shapes]), shapes, strict=True)
    )  # layout: order, pos, bucket per side
    none8 = _unused(torch.device(device), torch.uint8)
    flags = predicate_bits(group)
    n_chunks = counts.shape[2]
    _launch(
        "index_scatter", (n_chunks, B * Hg, 2), NT, 4 * (4 * (n_buckets + 1) + 3), qb, kb,
        qk if qk is not None else none8, kk if kk is not None else none8, counts, layout[0], layout[1], layout[2],
        q_ranges, q_nseg, k_ranges, k_nseg, T, n_chunks, n_buckets, has_bucket, qk is not None,
        program.block_q, program.block_k, qs, ks,
        bool(flags & P_CAUSAL), bool(flags & P_STRICT), bool(flags & P_NOT_SELF),
    )  # fmt: skip
    order, pos, bkt = layout
    out = [(order[s], pos[s], bkt[s], ranges, n) for s, ranges, n in ((0, q_ranges, q_nseg), (1, k_ranges, k_nseg))]
    return assemble_group(program, group, heads, dec, inputs.heads, T, device, out[0], out[1])
