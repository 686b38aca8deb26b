"""Index buffers lent per call (``tilesparse.backends.buffers``): a buffer is lent again only
once the group holding it is gone, only on its stream, never during a capture or to
``prepare()``, within the byte budget; and calls whose index buffers are reused give the
results of calls that allocate their own, forward and backward, with several calls' autograd
graphs alive at once (the layers of a training step)."""

from __future__ import annotations

import gc

import pytest
import torch

import tilesparse as ts
from tilesparse.backends import buffers
from tilesparse.backends.buffers import BufferPool, held_bytes, unpooled

VIEWS = (((2, 3), (3, 1), 0), ((4,), (1,), 8))  # (shape, strides, offset): two views of 12 elements


class _Holder:
    """Stands in for the PreparedGroup a build makes of an entry's views."""


def _lent(pool: BufferPool) -> tuple[list, _Holder]:
    e = pool.take()
    h = _Holder()
    pool.lend(e, h)
    return e, h


def test_a_buffer_is_lent_again_only_once_its_holder_is_gone():
    pool = BufferPool(12, VIEWS, torch.device("cpu"))
    e1, h1 = _lent(pool)
    e2, h2 = _lent(pool)
    assert e1 is not e2 and e1[0].data_ptr() != e2[0].data_ptr()
    assert [tuple(v.shape) for v in e1[1]] == [(2, 3), (4,)] and e1[1][1].data_ptr() == e1[0].data_ptr() + 32
    del h1
    e3, h3 = _lent(pool)
    assert e3 is e1  # the first holder is gone: its buffer and views again
    e4, h4 = _lent(pool)
    assert e4 is not e1 and e4 is not e2 and len(pool.entries) == 3


def test_an_entry_taken_and_not_yet_lent_is_not_taken_twice():
    pool = BufferPool(12, VIEWS, torch.device("cpu"))
    e1 = pool.take()
    e2 = pool.take()
    assert e1 is not e2
    pool.give_back(e1)  # its build failed: free again
    assert pool.take() is e1


def test_a_buffer_is_lent_again_only_on_its_stream(monkeypatch):
    stream = [11]
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: stream[0], raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    pool = BufferPool(12, VIEWS, torch.device("cpu"))
    pool.cuda = True  # read the (patched) current stream as a CUDA pool does
    e1, h1 = _lent(pool)
    del h1
    stream[0] = 22
    e2, h2 = _lent(pool)
    assert e2 is not e1 and e2[2] == 22  # free, but lent on another stream
    stream[0] = 11
    e3, h3 = _lent(pool)
    assert e3 is e1


def test_nothing_is_pooled_during_a_capture_or_inside_unpooled(monkeypatch):
    pool = BufferPool(12, VIEWS, torch.device("cpu"))
    pool.cuda = True
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: 5, raising=False)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    e, h = _lent(pool)
    assert pool.entries == [] and e[2] is None
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    with unpooled():
        e, h = _lent(pool)
    assert pool.entries == []
    e, h = _lent(pool)
    assert pool.entries == [e]


def test_the_pools_hold_at_most_the_byte_budget_and_give_it_back_when_gone(monkeypatch):
    gc.collect()
    before = held_bytes()
    monkeypatch.setattr(buffers, "POOL_BYTES", before + 2 * 48)  # room for two 12-element buffers
    pool = BufferPool(12, VIEWS, torch.device("cpu"))
    held = [_lent(pool) for _ in range(3)]
    assert len(pool.entries) == 2 and held_bytes() == before + 96
    assert all(held[2][0] is not e for e in pool.entries)  # the third allocated as before, kept by no pool
    del pool, held
    gc.collect()
    assert held_bytes() == before


def _inputs(seed: int, B=1, H=4, Hkv=2, T=70, D=16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g).requires_grad_()
    k, v = (torch.randn(B, Hkv, T, D, generator=g).requires_grad_() for _ in range(2))
    return q, k, v, torch.randn(B, H, T, D, generator=g)


@pytest.mark.parametrize(
    "spec",
    [ts.Hash(buckets=3), ts.QKDrop(keep=0.6), ts.Dense(), ts.PerHead(dense_heads=[1], rest=ts.Hash(buckets=2)),
     ts.TopKFeatures(k=3)],
    ids=["hash", "qkdrop", "dense", "perhead", "topk"],
)
def test_calls_reusing_index_buffers_give_the_results_of_calls_allocating_their_own(spec):
    """Three "layers" run their forwards with other inputs and decisions, their autograd graphs
    alive, then their backwards in reverse; then three more calls, which take the buffers the
    first ones gave back (and the groups the builds made of them the first time, copied: a
    TopKFeatures group's supports come from each call's decisions). Every output and gradient
    equals the same call without the pool."""
    attn = ts.compile(spec, causal=True, backend="triton")

    def step(seeds):
        outs = []
        for s in seeds:
            q, k, v, go = _inputs(s)
            dec = attn.decide(q, k, generator=torch.Generator().manual_seed(s))
            outs.append((attn(q, k, v, decisions=dec), (q, k, v), go))
        results = []
        for out, qkv, go in reversed(outs):
            results.append((out.detach(), *torch.autograd.grad(out, qkv, go)))
        return results

    with unpooled():
        want = step([1, 2, 3]) + step([4, 5, 6])
    gc.collect()  # the pools of earlier tests' ops gone now, not while this one counts
    before = held_bytes()
    got = step([1, 2, 3]) + step([4, 5, 6])
    assert held_bytes() > before, "no buffer was pooled"
    for w, g in zip(want, got, strict=True):
        for a, b in zip(w, g, strict=True):
            assert torch.equal(a, b)


def test_prepare_builds_its_groups_outside_the_pools(monkeypatch):
    """prepare() hands its groups to the caller, who may keep their tensors without them: every
    build it runs takes a buffer no pool keeps (the op's calls around it do pool theirs)."""
    attn = ts.compile(ts.Hash(buckets=3), causal=True, backend="triton")
    takes, pools = [], []
    take = BufferPool.take
    monkeypatch.setattr(BufferPool, "take", lambda self: takes.append(buffers._OFF[0]) or pools.append(self) or take(self))
    q, k, v, _ = _inputs(7)
    with torch.no_grad():
        attn(q, k, v)
    prepared = attn.prepare(q, k, v)
    with torch.no_grad():
        attn(q, k, v)
    assert takes == [False, True, False]
    pooled = [(e[0].data_ptr(), e[0].data_ptr() + 4 * e[0].numel()) for p in pools for e in p.entries]
    ptr = prepared.groups[0].q_order.data_ptr()
    assert pooled and not any(lo <= ptr < hi for lo, hi in pooled)
