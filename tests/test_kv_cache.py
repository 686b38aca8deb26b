"""The pattern-aware KV cache on the CPU: decoding and chunked prefill equal the whole sequence.

Property test: a random pattern (every kind, PerHead and Hybrid included), random decisions
(with their edge cases), GQA, and a random chunking of the sequence into prefill chunks and
single-token decode steps; the concatenated outputs equal the rows of the same op run once on
the whole sequence with the same decisions (the executor's tile model, and the Triton kernels
under the interpreter for the chunks). Examples: the criteria's chunk invariance (lsh with
the cache's rotations, topk_abs), what is stored (QKDrop's unstored keys, TopKFeatures'
compressed keys), the key index against a sort, reads per decode step, errors.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.testing import decisions, specs


def _slice(dec: ts.Decisions, sl: slice) -> ts.Decisions:
    return ts.Decisions(**{n: None if t is None else t[:, :, sl] for n, t in dec.items()})


def _chunked(attn, cache, q, k, v, sizes, dec=None):
    outs, t = [], 0
    for n in sizes:
        sl = slice(t, t + n)
        d = None if dec is None else _slice(dec, sl)
        outs.append(attn(q[:, :, sl], k[:, :, sl], v[:, :, sl], cache=cache, decisions=d))
        t += n
    return torch.cat(outs, dim=2)


@st.composite
def _chunking(draw, total: int):
    sizes = []
    while sum(sizes) < total:
        left = total - sum(sizes)
        sizes.append(draw(st.one_of(st.just(1), st.integers(1, left))) if left > 1 else 1)
    return sizes


# the same examples on every run (derandomize): a draw of many one-token steps through the
# interpreter costs 20x a short one, and CI's time should not vary with it
# (tests/gpu/test_decode_gpu.py checks decoding and chunks against the whole sequence at 32k)
@settings(max_examples=30, derandomize=True, database=None)
@given(data=st.data(), backend=st.sampled_from(["executor", "triton"]))
def test_chunked_and_decoded_equal_the_whole_sequence(data, backend):
    B = data.draw(st.integers(1, 2))
    Hkv = data.draw(st.integers(1, 2))
    H = Hkv * data.draw(st.sampled_from([1, 2]))
    T = data.draw(st.integers(1, 40 if backend == "executor" else 24))
    D = 16
    spec = data.draw(specs(heads=H, max_k=8))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    q = torch.randn(B, H, T, D, generator=g)
    k, v = (torch.randn(B, Hkv, T, D, generator=g) for _ in range(2))
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, backend=backend)
    whole = attn(q, k, v, decisions=dec)
    cache = attn.new_cache(B, T + data.draw(st.integers(0, 5)), Hkv, D, heads=H)
    got = _chunked(attn, cache, q, k, v, data.draw(_chunking(T)), dec)
    torch.testing.assert_close(got, whole, atol=2e-5, rtol=1e-4)
    assert cache.length == T


@pytest.mark.parametrize(
    "spec",
    [ts.Hash(buckets=5), ts.TopKFeatures(k=3), ts.Hybrid(parts=[ts.Hash(buckets=4), ts.TopKFeatures(k=4)])],
    ids=str,
)
def test_per_token_criteria_decide_the_same_whatever_the_chunking(spec):
    """lsh with the cache's rotations and topk_abs decide each token alone: the cache's own
    decisions on chunks equal its decisions on the whole sequence, and so do the outputs."""
    g = torch.Generator().manual_seed(3)
    B, H, Hkv, T, D = 2, 4, 2, 30, 16
    q = torch.randn(B, H, T, D, generator=g)
    k, v = (torch.randn(B, Hkv, T, D, generator=g) for _ in range(2))
    attn = ts.compile(spec, backend="executor")
    whole_dec = attn.new_cache(B, T, Hkv, D, heads=H, seed=7).decide(q, k)
    cache = attn.new_cache(B, T, Hkv, D, heads=H, seed=7)
    got = _chunked(attn, cache, q, k, v, [7, 1, 1, 12, 1, 8])
    for name, t in cache.key_decisions().items():
        if t is not None:
            assert torch.equal(t.long(), getattr(whole_dec, name).long()), name
    torch.testing.assert_close(got, attn(q, k, v, decisions=whole_dec), atol=2e-5, rtol=1e-4)


def test_keys_every_head_of_a_group_drops_are_not_stored():
    B, H, Hkv, T, D = 1, 4, 2, 10, 16
    attn = ts.compile(ts.QKDrop(keep=0.5))
    k_keep = torch.zeros(B, H, T, dtype=torch.bool)
    k_keep[0, 0, :4] = True  # kv head 0: tokens 0-3 kept by query head 0
    k_keep[0, 3, 8] = True  # kv head 1: token 8 kept by query head 3
    dec = ts.Decisions(q_keep=torch.ones(B, H, T, dtype=torch.bool), k_keep=k_keep)
    cache = attn.new_cache(B, T, Hkv, D, heads=H, kv_capacity=5)
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(B, Hkv, T, D), torch.randn(B, Hkv, T, D)
    attn(q, k, v, cache=cache, decisions=dec)
    assert cache.n_slots.tolist() == [[4, 1]]
    assert cache.slot[0, 1].tolist() == [-1] * 8 + [0, -1]
    dense = ts.compile(ts.Dense()).new_cache(B, T, Hkv, D, heads=H)
    ts.compile(ts.Dense())(q, k, v, cache=dense)
    assert cache.memory_bytes() < dense.memory_bytes()
    assert "not stored (5 of 20 token rows stored)" in cache.explain()


def test_a_full_capacity_is_an_error_naming_it():
    attn = ts.compile(ts.Dense())
    cache = attn.new_cache(1, 8, 1, 16, kv_capacity=4)
    x = torch.randn(1, 1, 5, 16)
    with pytest.raises(ValueError, match="kv_capacity=4 slots per kv head are full"):
        attn(x, x, x, cache=cache)
    cache = attn.new_cache(1, 4, 1, 16)
    with pytest.raises(ValueError, match="holds 0 of max_tokens=4 tokens; 5 more do not fit"):
        attn(x, x, x, cache=cache)


def test_topk_keys_are_stored_compressed():
    B, H, T, D, k = 2, 8, 64, 128, 8
    attn = ts.compile(ts.TopKFeatures(k=k))
    cache = attn.new_cache(B, T, H, D, dtype=torch.float16)
    x = torch.randn(B, H, T, D).half()
    attn(x, x, x, cache=cache)
    assert cache.k is None and cache.k_ids.dtype == torch.int16 and cache.k_vals.shape == (B, H, T, k)
    key_bytes = cache.k_ids.numel() * 2 + cache.k_vals.numel() * 2
    assert key_bytes * 5 <= B * H * T * D * 2  # at least 5x smaller than dense fp16 K
    assert cache.memory_per_token() < cache.dense_bytes_per_token()


@settings(max_examples=20)
@given(data=st.data())
def test_the_key_index_groups_positions_by_bucket(data):
    """After any chunking, each (b, h)'s index lists its readable positions sorted by (bucket,
    position), with every group's start: what a sort would give."""
    B, H, T, n_b = 2, 3, data.draw(st.integers(1, 30)), data.draw(st.integers(1, 5))
    spec = ts.Hybrid(parts=[ts.Hash(buckets=n_b), ts.QKDrop(keep=0.5)])
    dec = data.draw(decisions(spec, (B, H, T, 16)))
    attn = ts.compile(spec, backend="executor")
    cache = attn.new_cache(B, T, H, 16)
    x = torch.randn(B, H, T, 16)
    _chunked(attn, cache, x, x, x, data.draw(_chunking(T)), dec)
    for b in range(B):
        for h in range(H):
            kept = dec.k_keep[b, h]
            pos = torch.arange(T)[kept]
            bucket = dec.k_bucket[b, h][kept].long()
            want = pos[torch.argsort(bucket * T + pos)]
            n = int(cache.starts[b, h, -1])
            assert cache.index[b, h, :n].tolist() == want.tolist()
            counts = torch.bincount(bucket, minlength=n_b)
            assert cache.starts[b, h].tolist() == [0, *counts.cumsum(0).tolist()]


def test_a_decode_step_reads_only_its_bucket():
    B, H, T, D = 1, 2, 64, 16
    attn = ts.compile(ts.Hash(buckets=4))
    cache = attn.new_cache(B, T + 1, H, D)
    bucket = (torch.arange(T + 1) % 4).to(torch.int32).expand(B, H, T + 1)
    dec = ts.Decisions(q_bucket=bucket.clone(), k_bucket=bucket.clone())
    x = torch.randn(B, H, T + 1, D)
    _chunked(attn, cache, x, x, x, [T, 1], dec)
    r = cache.last_reads
    assert r.cached == B * H * (T + 1) and r.keys == B * H * 17  # bucket 0: positions 0, 4, .., 64
    assert "read 34 of 130 key rows" in cache.explain()


def test_wrong_cache_use_is_named():
    attn = ts.compile(ts.Hash(buckets=2))
    cache = attn.new_cache(1, 8, 2, 16)
    x = torch.randn(1, 2, 3, 16)
    with pytest.raises(ValueError, match="this cache was made for Hash"):
        ts.compile(ts.Dense())(x, x, x, cache=cache)
    with pytest.raises(ValueError, match="a KV cache serves causal ops only"):
        nc = ts.compile(ts.Dense(), causal=False)
        nc(x, x, x, cache=nc.new_cache(1, 8, 2, 16))
    with pytest.raises(ValueError, match=r"q must be \(B=1, H=2, n, D=16\)"):
        attn(x[:, :, :2], x, x, cache=cache)
    with pytest.raises(TypeError, match="cache must be a tilesparse.KVCache"):
        attn(x, x, x, cache="cache")
    with pytest.raises(ValueError, match="heads=3 must be a multiple of kv_heads=2"):
        attn.new_cache(1, 8, 2, 16, heads=3)
