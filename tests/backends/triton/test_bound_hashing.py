"""The Triton builder's bound hashing build (``TritonBuilder.bind_hashing``), which a call with
its decisions made in it runs where the plan gives the lsh hashing to the builder (on CUDA): the
hashing launch fills the call's bucket buffers, then the build bound to the call's signature
reads them into a lent index buffer. Run here on the interpreter, where no plan hashes in the
builder (the criterion's torch matmul is faster on the CPU)."""

from __future__ import annotations

import gc

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
