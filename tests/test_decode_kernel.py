"""The Triton split-K decode kernel under TRITON_INTERPRET=1, on the CPU, at small sizes.

Property test: a cache filled with random patterns' decisions (GQA, every kind whose heads
the kernel runs), then one decode step by the kernel equals the torch decode step and the
last row of the whole-sequence op; the split sizes are varied so rows cross several chunks,
including empty chunks and rows with nothing kept. The merge of partial results is checked on
its own against a one-chunk softmax.
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.triton.decode import decode_split, merge_splits, split_count
from tilesparse.inference import decode_step, key_slices
from tilesparse.testing import decisions

from builtin_specs import one_of_each_kind

SPECS = [
    *one_of_each_kind(keep=0.5, buckets=3, k=4, hybrid_buckets=2, hybrid_keep=0.6).values(),
    ts.Hash(buckets=2, attend_self=False),
    ts.Hybrid(parts=[ts.TopKFeatures(k=3), ts.QKDrop(keep=0.6)]),
]


def _q_dec(dec: ts.Decisions, t: int) -> ts.Decisions:
    return ts.Decisions(**{n: x[:, :, t : t + 1] for n, x in dec.items() if x is not None and n.startswith("q_")})


@settings(max_examples=20)
@given(data=st.data(), spec=st.sampled_from(SPECS), blocks=st.sampled_from([(16, 4), (16, 64), (32, 2)]))
def test_kernel_equals_torch_decode_and_the_whole_sequence(data, spec, blocks):
    B, Hkv = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    H, T, D = Hkv * data.draw(st.sampled_from([1, 2])), data.draw(st.integers(1, 70)), 16
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**31)))
    q = torch.randn(B, H, T, D, generator=g)
    k, v = (torch.randn(B, Hkv, T, D, generator=g) for _ in range(2))
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, backend="executor")
    cache = attn.new_cache(B, T + data.draw(st.integers(0, 20)), Hkv, D, heads=H)
    x = lambda t, sl: t[:, :, sl]  # noqa: E731
    if T > 1:
        head = slice(0, T - 1)
        attn(x(q, head), x(k, head), x(v, head), cache=cache,
             decisions=ts.Decisions(**{n: None if t is None else t[:, :, head] for n, t in dec.items()}))  # fmt: skip
    last = slice(T - 1, T)
    last_dec = ts.Decisions(**{n: None if t is None else t[:, :, last] for n, t in dec.items()})
    cache.append(x(k, last), x(v, last), last_dec)
    want = attn(q, k, v, decisions=dec)[:, :, -1:]
    q_dec = _q_dec(dec, T - 1)
    torch_out = decode_step(cache, x(q, last), q_dec, None, kernel="torch")
    triton_out = decode_step(cache, x(q, last), q_dec, None, kernel="triton")
    torch.testing.assert_close(torch_out, want, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(triton_out, want, atol=2e-5, rtol=1e-4)
    # the split sizes themselves: many small chunks
    block_n, max_splits = blocks
    lo, count = key_slices(cache, q_dec)
    qf = q[:, :, -1].float()
    if cache.k_ids is not None:
        qf = qf * torch.zeros_like(qf).scatter_(-1, q_dec.q_support[:, :, 0].long(), 1.0)
    not_self = cache._hash is not None and not cache._hash.attend_self
    out = decode_split(qf, cache.k, cache.v, cache.index, cache.slot, lo, count, D**-0.5, k_ids=cache.k_ids,
                       k_vals=cache.k_vals, self_pos=T - 1 if not_self else None, block_n=block_n,
                       max_splits=max_splits)  # fmt: skip
    torch.testing.assert_close(out.unsqueeze(2), want, atol=2e-5, rtol=1e-4)


def test_split_count_covers_the_capacity_in_block_multiples():
    for cap in (1, 63, 64, 65, 1000, 131072):
        n, chunk = split_count(cap, 64, 64)
        assert chunk % 64 == 0 and n * chunk >= cap and (n - 1) * chunk < cap and n <= 64


def test_merge_of_partial_softmaxes_is_the_whole_softmax():
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 40, generator=g)
    v = torch.randn(40, 8, generator=g)
    s[1, :] = float("-inf")  # a row with nothing kept
    parts_o, parts_lse = [], []
    for c in range(4):
        sc = s[:, c * 10 : (c + 1) * 10] * 1.4426950408889634
        m = sc.amax(-1, keepdim=True)
        m = torch.where(torch.isfinite(m), m, 0.0)
        p = torch.exp2(sc - m)
        l = p.sum(-1, keepdim=True)
        parts_o.append((p @ v[c * 10 : (c + 1) * 10]) / torch.where(l == 0, 1.0, l))
        parts_lse.append(torch.where(l[:, 0] == 0, float("-inf"), m[:, 0] + torch.log2(l[:, 0])))
    got = merge_splits(torch.stack(parts_o, 1), torch.stack(parts_lse, 1))
    want = torch.nan_to_num(torch.softmax(s, -1)) @ v
    torch.testing.assert_close(got, want)
    assert torch.equal(got[1], torch.zeros(8))
