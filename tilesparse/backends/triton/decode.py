"""Split-K decode (FlashDecoding) over a pattern-aware KV cache's key index.

One query row per (batch, query head) reads only the cached positions its pattern keeps: the
slice ``index[b, h, lo : lo + count]`` of the cache's per-head key index (its bucket under
Hash, the kept keys under QKDrop, every key otherwise). The slice is cut into ``n_splits``
chunks; one program per (chunk, b, h) runs the online softmax over its chunk in BLOCK_N-key
tiles and writes a partial (o, lse); :func:`merge_splits` combines them. Keys are read through
the cache's position -> slot map (K, V stored once per kv head) or, with ``SPARSE``, as the
compressed (feature id, value) pairs of TopKFeatures: the score is q~ gathered at the key's
ids times its values.

Graph-capturable by design: the grid comes from the cache's capacity (``n_splits`` fixed per
cache), ``lo`` and ``count`` are device tensors, nothing is read back. Tested under
TRITON_INTERPRET=1 against the torch decode step (tests/test_decode_kernel.py) and on the H200
in tests/gpu/test_decode_gpu.py.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import Sites

__all__ = ["decode_split", "merge_splits", "split_count"]

LOG2E = 1.4426950408889634


@triton.jit(do_not_specialize=["n_heads", "max_tokens", "capacity", "chunk", "self_pos"])
def _decode_split(Q, K, V, KIDS, KVALS, INDEX, SLOT, LO, COUNT, O_PART, LSE_PART,
                  n_heads, max_tokens, capacity, chunk, self_pos, qk_scale,
                  GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                  N_SPLITS: tl.constexpr, SPARSE: tl.constexpr, KF: tl.constexpr, KF_PAD: tl.constexpr,
                  NOT_SELF: tl.constexpr):
    """One chunk of one (b, h) query row's key slice: partial o (unnormalized by other
    chunks) and its lse (log2 units, -inf when the chunk keeps nothing)."""
    tl.static_assert(BLOCK_D >= HEAD_DIM, "BLOCK_D pads the head dim to a power of two")
    split = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b = bh // n_heads
    hk = (bh % n_heads) // GROUP
    kv_row = (b * (n_heads // GROUP) + hk)  # (b, kv head)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    # q (q~ with SPARSE) stays in registers
    q = tl.load(Q + bh * HEAD_DIM + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    lo = tl.load(LO + bh)
    count = tl.load(COUNT + bh)
    start = split * chunk
    end = tl.minimum(start + chunk, count)
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for j0 in range(start, end, BLOCK_N):
        offs = j0 + tl.arange(0, BLOCK_N)
        ok = offs < end
        pos = tl.load(INDEX + bh * (max_tokens + 1) + lo + offs, mask=ok, other=0)
        if NOT_SELF:
            ok = ok & (pos != self_pos)
        slot = tl.load(SLOT + kv_row * max_tokens + pos, mask=ok, other=0).to(tl.int64)
        if SPARSE:
            offs_f = tl.arange(0, KF_PAD)
            f_ok = ok[:, None] & (offs_f < KF)[None, :]
            at = (bh * max_tokens + pos.to(tl.int64))[:, None] * KF + offs_f[None, :]
            ids = tl.load(KIDS + at, mask=f_ok, other=0).to(tl.int32)
            vals = tl.load(KVALS + at, mask=f_ok, other=0.0).to(tl.float32)
            q_at = tl.load(Q + bh * HEAD_DIM + ids, mask=f_ok, other=0.0).to(tl.float32)
            s = tl.sum(q_at * vals, 1)
        else:
            k = tl.load(K + (kv_row * capacity + slot)[:, None] * HEAD_DIM + offs_d[None, :],
                        mask=ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
            s = tl.sum(k * q[None, :], 1)
        s = tl.where(ok, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # nothing kept yet: subtract 0
        p = tl.math.exp2(s - m_safe)
        alpha = tl.math.exp2(m_i - m_safe)
        v = tl.load(V + (kv_row * capacity + slot)[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        l_i = l_i * alpha + tl.sum(p, 0)
        m_i = m_new
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    lse = tl.where(empty, float("-inf"), m_i + tl.math.log2(l_safe))
    tl.store(LSE_PART + bh * N_SPLITS + split, lse)
    tl.store(O_PART + (bh * N_SPLITS + split) * HEAD_DIM + offs_d, acc / l_safe, mask=d_ok)


def split_count(capacity: int, block_n: int = 64, max_splits: int = 64) -> tuple[int, int]:
    """(n_splits, chunk): a key slice of up to ``capacity`` positions in at most
    ``max_splits`` chunks of a multiple of ``block_n`` keys (fixed per cache: graph replay)."""
    chunk = max(block_n, -(-capacity // max_splits))
    chunk = -(-chunk // block_n) * block_n
    return -(-capacity // chunk), chunk


def decode_split(
    q: Tensor,
    k: Tensor | None,
    v: Tensor,
    index: Tensor,
    slot: Tensor,
    lo: Tensor,
    count: Tensor,
    scale: float,
    *,
    k_ids: Tensor | None = None,
    k_vals: Tensor | None = None,
    self_pos: int | None = None,
    block_n: int = 64,
    max_splits: int = 64,
) -> Tensor:
    """Decode attention of q (B, H, D) (q~ for compressed keys) over the cache slices
    ``index[b, h, lo : lo + count]``; K, V (B, Hkv, capacity, D) by slot, or ``k_ids``,
    ``k_vals`` (B, H, max_tokens, k). ``self_pos`` excludes that position (attend_self=False).
    Returns (B, H, D) float32."""
    B, H, D = q.shape
    Hkv, capacity = v.shape[1], v.shape[2]
    max_tokens = slot.shape[2]
    n_splits, chunk = split_count(max_tokens, block_n, max_splits)
    o_part = torch.empty((B, H, n_splits, D), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((B, H, n_splits), dtype=torch.float32, device=q.device)
    sparse = k_ids is not None
    kf = k_ids.shape[-1] if sparse else 1
    dummy = v
    not_self = self_pos is not None
    # self_pos changes every step: the site keys the scalars as Triton specializes them
    site = _SITES.get((B, H, Hkv, D, n_splits, block_n, kf if sparse else None, not_self), lambda: (
        (n_splits, B * H),
        dict(GROUP=H // Hkv, HEAD_DIM=D, BLOCK_D=max(16, triton.next_power_of_2(D)), BLOCK_N=block_n,
             N_SPLITS=n_splits, SPARSE=sparse, KF=kf, KF_PAD=max(2, triton.next_power_of_2(kf)), NOT_SELF=not_self),
    ), varying=True)  # fmt: skip
    tensors = (
        q.contiguous(), dummy if k is None else k.contiguous(), v.contiguous(),
        k_ids.contiguous() if sparse else index, k_vals.contiguous() if sparse else dummy,
        index.contiguous(), slot.contiguous(), lo.to(torch.int32).contiguous(), count.to(torch.int32).contiguous(),
        o_part, lse_part,
    )  # fmt: skip
    site(tensors, (), (H, max_tokens, capacity, chunk, -1 if self_pos is None else self_pos, scale * LOG2E))
    return merge_splits(o_part, lse_part)


_SITES = Sites(_decode_split)  # the launch's sites by sizes and flags (its constants follow from them)


def merge_splits(o_part: Tensor, lse_part: Tensor) -> Tensor:
    """Combine per-chunk (o, lse in log2 units) into the row's output; a row whose chunks all
    kept nothing gives zeros. Torch ops only, no host reads."""
    m = lse_part.amax(-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, 0.0)
    w = torch.exp2(lse_part - m)  # -inf chunks weigh 0
    total = w.sum(-1, keepdim=True)
    return (w.unsqueeze(-1) * o_part).sum(-2) / torch.where(total == 0, 1.0, total)
