"""The Triton builder's bound hashing build (``TritonBuilder.bind_hashing``), which a call with
its decisions made in it runs where the plan gives the lsh hashing to the builder (on CUDA): the
hashing launch fills the call's bucket buffers, then the build bound to the call's signature
reads them into a lent index buffer; and its hashing launch bound to the call's sizes
(``hashing.BoundHash``) against the per-call one (``hash_into``). Run here on the interpreter,
where no plan hashes in the builder (the criterion's torch matmul is faster on the CPU)."""

from __future__ import annotations

import gc

import pytest
import torch

import tilesparse as ts
from tilesparse.backends import BUILDERS
from tilesparse.ir import check_inputs
from tilesparse.ir.hashing import LshHash
from tilesparse.patterns.criteria import lsh_draw

FIELDS = ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges", "k_nseg")


def test_the_bound_hashing_build_hashes_then_builds_into_lent_buffers():
    B, H, T, D, buckets = 1, 2, 40, 16, 4
    attn = ts.compile(ts.Hash(buckets=buckets), causal=True, backend="triton")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    plan = attn.plan(q, k, v, decisions=attn.decide(q, k))
    (a,) = plan.assignments
    inputs = check_inputs(q, k, v, scale=attn.scale)
    rotations = lsh_draw(H, D, buckets, q.device, torch.Generator().manual_seed(1))

    def request() -> tuple[ts.Decisions, LshHash]:
        qb, kb = (torch.full((B, H, T), -1, dtype=torch.int32) for _ in range(2))
        return ts.Decisions(q_bucket=qb, k_bucket=kb), LshHash(rotations, buckets, qb, kb)

    builder = BUILDERS["triton"]
    bound = builder.bind_hashing(plan.program, a.group, a.heads, inputs)
    dec, lsh = request()
    got = bound(dec, inputs, lsh)
    want_dec, want_lsh = request()
    want = builder.build_hashing(plan.program, a.group, a.heads, want_dec, inputs, want_lsh)
    assert int(lsh.q_bucket.min()) >= 0 and int(lsh.k_bucket.min()) >= 0  # hashed before the build read them
    assert torch.equal(lsh.q_bucket, want_lsh.q_bucket) and torch.equal(lsh.k_bucket, want_lsh.k_bucket)
    for name in FIELDS:
        assert torch.equal(getattr(got, name), getattr(want, name)), name
    # a second call takes the buffer the first call's group gave back: the build is the bound one
    address = got.q_order.data_ptr()
    del got
    gc.collect()
    dec, lsh = request()
    again = bound(dec, inputs, lsh)
    assert again.q_order.data_ptr() == address
    for name in FIELDS:
        assert torch.equal(getattr(again, name), getattr(want, name)), name


def _hash_args(B=2, H=4, Hkv=2, T=50, D=16, buckets=6, dtype=torch.float32):
    g = torch.Generator().manual_seed(3)
    q = torch.randn(B, H, T, D, generator=g).to(dtype)
    k = torch.randn(B, Hkv, T, D, generator=g).to(dtype)
    rotations = lsh_draw(H, D, buckets, q.device, torch.Generator().manual_seed(4))
    return q, k, rotations, buckets


def _buffers(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    B, H, T, _ = q.shape
    return tuple(torch.full((B, H, T), -1, dtype=torch.int32) for _ in range(2))


def test_the_bound_hash_launch_writes_what_hash_into_writes(monkeypatch):
    """BoundHash (the sizes checked and the launch worked out once; hash_into not called) against
    hash_into (per call), bit for bit, with GQA, a length that is not a multiple of the kernel's
    block, fp32 and fp16, and through the unbound switch (which calls hash_into)."""
    from tilesparse.backends.triton import hashing

    checked = hashing.hash_into
    calls = []
    monkeypatch.setattr(hashing, "hash_into", lambda *a: calls.append(1) or checked(*a))
    for dtype in (torch.float32, torch.float16):
        q, k, rotations, buckets = _hash_args(dtype=dtype)
        want = _buffers(q)
        checked(q, k, rotations, buckets, *want)
        assert int(want[0].min()) >= 0 and int(want[1].min()) >= 0
        bound = hashing.BoundHash(q, k, buckets)
        got = _buffers(q)
        bound(q, k, rotations, *got)
        assert not calls  # the bound launch
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        got = _buffers(q)
        with hashing.unbound_hashing():
            bound(q, k, rotations, *got)
        assert calls == [1]
        calls.clear()
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_the_bound_hash_launch_sends_unfit_buffers_to_the_checked_path():
    """Buffers of another shape, dtype or layout than the bound ones never reach the kernel:
    hash_into's checks name them."""
    from tilesparse.backends.triton.hashing import BoundHash

    q, k, rotations, buckets = _hash_args()
    bound = BoundHash(q, k, buckets)
    qb, kb = _buffers(q)
    for bad, match in (
        ((qb[:, :, :-1].contiguous(), kb), "q_bucket must be a contiguous"),
        ((qb, kb.long()), "k_bucket must be a contiguous"),
        ((qb, kb.transpose(0, 1).contiguous().transpose(0, 1)), "k_bucket must be a contiguous"),
    ):
        with pytest.raises(ValueError, match=match):
            bound(q, k, rotations, *bad)
    with pytest.raises(ValueError, match="rotations of shape"):
        bound(q, k, rotations[:, :, :1].contiguous(), qb, kb)
    with pytest.raises(ValueError, match="does not fit q"):
        BoundHash(q, k[:, :, :-1], buckets)
