"""The built-in ``lsh`` criterion's hashing in one Triton launch: every head of q and k.

Per block of tokens of one (batch, query head, side) a program loads the tokens' vectors once,
projects them on the head's rotation R (D x ceil(buckets / 2)) with one dot (fp32 accumulation;
fp32 inputs as three tf32 products, fp32-accurate, as the attention kernels do), and takes the
argmax over [xR, -xR[:, :buckets - ceil(buckets / 2)]] in registers, ties to the earlier
direction: the criterion's definition (:func:`tilesparse.patterns.criteria.lsh_matmul`)
without its round trip through memory (a projection tensor, its max, its min and a select:
five passes over (B, H, T, ceil(buckets / 2))). Keys are read per kv head: the query heads of a
kv group hash its keys with their own rotations.

The projection is accumulated in fp32, where torch's 16-bit matmul rounds it to the inputs'
dtype first: on a near-tie a token may land in the other bucket than the criterion's torch ops
put it in. ``attn.decide`` and the call hash with the same kernel, so they agree; a test holds
every bucket to the argmax up to that rounding (tests/backends/triton/test_hashing.py).
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl
from torch import Tensor

from ..switch import switched_on
from .launch import Site, cdiv, lean

__all__ = ["MAX_HALF", "MAX_HEAD_DIM", "BoundHash", "hash_constexprs", "hash_into", "lsh_hash_reasons",
           "unbound_hashing"]

_UNBOUND = [False]  # unbound_hashing() in force

MAX_HALF = 128  # directions a program holds: up to 256 buckets
MAX_HEAD_DIM = 256


@triton.jit(do_not_specialize=["seqlen", "n_heads", "k_group"])
def _lsh_hash(Q, K, ROT, Q_OUT, K_OUT,
              stride_qb, stride_qh, stride_qt, stride_qd,
              stride_kb, stride_kh, stride_kt, stride_kd,
              seqlen, n_heads, k_group,
              HEAD_DIM: tl.constexpr, HALF: tl.constexpr, NEGATED: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_H: tl.constexpr, PRECISION: tl.constexpr):
    """Buckets of BLOCK_T tokens of one (batch, query head) on one side (program_id 2: 0 for q,
    1 for k) into the (B, H, T) int32 outputs."""
    pid_t = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_d = tl.arange(0, BLOCK_D)
    offs_c = tl.arange(0, BLOCK_H)
    t_ok = offs_t < seqlen
    d_ok = offs_d < HEAD_DIM
    if tl.program_id(2) == 0:
        base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        ptrs = base + offs_t[:, None].to(tl.int64) * stride_qt + offs_d[None, :] * stride_qd
        out = Q_OUT
    else:
        base = K + b.to(tl.int64) * stride_kb + (h // k_group).to(tl.int64) * stride_kh
        ptrs = base + offs_t[:, None].to(tl.int64) * stride_kt + offs_d[None, :] * stride_kd
        out = K_OUT
    x = tl.load(ptrs, mask=t_ok[:, None] & d_ok[None, :], other=0.0)
    rot = tl.load(ROT + h.to(tl.int64) * (HEAD_DIM * HALF) + offs_d[:, None] * HALF + offs_c[None, :],
                  mask=d_ok[:, None] & (offs_c[None, :] < HALF), other=0.0)  # fmt: skip
    proj = tl.dot(x, rot.to(x.dtype), input_precision=PRECISION)  # (BLOCK_T, BLOCK_H) fp32
    # argmax over the HALF directions xR, then argmin over the first NEGATED (the -xR ones)
    top_src = tl.where(offs_c[None, :] < HALF, proj, float("-inf"))
    top_arg = tl.argmax(top_src, 1, tie_break_left=True)
    top = tl.max(top_src, 1)
    low_src = tl.where(offs_c[None, :] < NEGATED, proj, float("inf"))
    low_arg = tl.argmin(low_src, 1, tie_break_left=True)
    low = tl.min(low_src, 1)
    bucket = tl.where(top >= -low, top_arg, HALF + low_arg)
    tl.store(out + pid_bh.to(tl.int64) * seqlen + offs_t, bucket.to(tl.int32), mask=t_ok)


def lsh_hash_reasons(device_type: str, head_dim: int, buckets: int, interpreting: bool) -> list[str]:
    """Why the kernel should not hash (empty when it should)."""
    reasons = []
    if device_type != "cuda":
        kind = "the Triton interpreter runs kernels in Python" if interpreting else "Triton runs on CUDA"
        reasons.append(f"on {device_type!r} the criterion's torch matmul hashes faster ({kind})")
    if math.ceil(buckets / 2) > MAX_HALF:
        reasons.append(
            f"{buckets} buckets: the hashing kernel holds at most {MAX_HALF} directions ({2 * MAX_HALF} buckets)"
        )
    if head_dim > MAX_HEAD_DIM:
        reasons.append(f"head dim {head_dim} > {MAX_HEAD_DIM}")
    return reasons


def hash_into(q: Tensor, k: Tensor, rotations: Tensor, buckets: int, q_bucket: Tensor, k_bucket: Tensor) -> None:
    """Every head of q (B, H, T, D) and k (B, Hkv, T, D) hashed with ``rotations`` (H, D,
    ceil(buckets / 2): the criterion's float32 draw, which the kernel rounds to q's dtype) into
    the contiguous (B, H, T) int32 buffers (one launch)."""
    B, H, T, D = q.shape
    half = rotations.shape[-1]
    if half != math.ceil(buckets / 2) or rotations.shape[:2] != (H, D):
        raise ValueError(
            f"rotations of shape {tuple(rotations.shape)} do not fit {H} heads of dim {D} and {buckets} buckets"
        )
    for name, t in (("q_bucket", q_bucket), ("k_bucket", k_bucket)):
        if t.shape != (B, H, T) or t.dtype != torch.int32 or not t.is_contiguous():
            raise ValueError(
                f"{name} must be a contiguous ({B}, {H}, {T}) int32 tensor, got {tuple(t.shape)} {t.dtype}"
            )
    if k.shape[0] != B or k.shape[2] != T or k.shape[3] != D or H % k.shape[1]:
        raise ValueError(f"k of shape {tuple(k.shape)} does not fit q of shape {tuple(q.shape)}")
    from .interpreter import patch_bf16_dot
    from .op import interpreting

    if interpreting():
        patch_bf16_dot()
    # the criterion's draw is float32 and contiguous already (no dispatch for a no-op cast)
    rot = rotations if rotations.dtype == torch.float32 and rotations.is_contiguous() else rotations.float().contiguous()
    constants = hash_constexprs(D, buckets, q.dtype == torch.float32)
    lean(_lsh_hash)[(cdiv(T, constants["BLOCK_T"]), B * H, 2)](
        q, k, rot, q_bucket, k_bucket, *q.stride(), *k.stride(), T, H, H // k.shape[1],
        **constants, num_warps=4, num_stages=1,
    )  # fmt: skip


class BoundHash:
    """:func:`hash_into` for the calls of one signature (q and k's shapes and dtype) and bucket
    count: the sizes checked, the grid, the scalars after the strides and the constants worked
    out once. A call whose tensors do not have the bound shapes, or whose buffers are not
    contiguous int32, goes through :func:`hash_into` and its checks (which name what is wrong)."""

    __slots__ = ("buckets", "rot_shape", "bucket_shape", "scalars", "site")

    def __init__(self, q: Tensor, k: Tensor, buckets: int):
        B, H, T, D = q.shape
        if k.shape[0] != B or k.shape[2] != T or k.shape[3] != D or H % k.shape[1]:
            raise ValueError(f"k of shape {tuple(k.shape)} does not fit q of shape {tuple(q.shape)}")
        from .interpreter import patch_bf16_dot
        from .op import interpreting

        if interpreting():
            patch_bf16_dot()
        self.buckets = buckets
        self.rot_shape = (H, D, math.ceil(buckets / 2))
        self.bucket_shape = (B, H, T)
        constants = dict(hash_constexprs(D, buckets, q.dtype == torch.float32), num_warps=4, num_stages=1)
        self.scalars = (T, H, H // k.shape[1])
        self.site = Site(lean(_lsh_hash), (cdiv(T, constants["BLOCK_T"]), B * H, 2), constants)

    def __call__(self, q: Tensor, k: Tensor, rotations: Tensor, q_bucket: Tensor, k_bucket: Tensor) -> None:
        if (
            _UNBOUND[0]
            or rotations.shape != self.rot_shape
            or rotations.dtype != torch.float32
            or not rotations.is_contiguous()
            or q_bucket.shape != self.bucket_shape
            or k_bucket.shape != self.bucket_shape
            or q_bucket.dtype != torch.int32
            or k_bucket.dtype != torch.int32
            or not (q_bucket.is_contiguous() and k_bucket.is_contiguous())
        ):
            hash_into(q, k, rotations, self.buckets, q_bucket, k_bucket)
            return
        self.site((q, k, rotations, q_bucket, k_bucket), (), (*q.stride(), *k.stride(), *self.scalars))


def unbound_hashing():
    """Calls inside the block hash through :func:`hash_into`, checked and sized per call, as
    before :class:`BoundHash` (A/B timing within one process)."""
    return switched_on(_UNBOUND)


@functools.cache
def hash_constexprs(head_dim: int, buckets: int, fp32: bool) -> dict:
    """The hashing kernel's compile-time constants for a launch (and for sm90.index_variants,
    which compiles the launches' variants); one dict per argument tuple: read, never written."""
    from .op import _block_d

    half = math.ceil(buckets / 2)
    return dict(
        HEAD_DIM=head_dim, HALF=half, NEGATED=buckets - half, BLOCK_T=64 if head_dim > 128 or fp32 else 128,
        BLOCK_D=_block_d(head_dim), BLOCK_H=_block_d(half), PRECISION="tf32x3" if fp32 else "tf32",
    )
