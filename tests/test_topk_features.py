"""TopKFeatures semantics, end to end on the CPU: what the spec means, checked against an
oracle written here from the issue's definition alone (no tilesparse math reused).

- ``topk_abs`` keeps the k features of largest |x| per (b, h, token), ties to the lowest id,
  ids increasing (a property over values drawn from a few levels, so ties are common);
- the score of (i, j) is q~_i . k~_j over the kept features only, V dense, and the mask of
  the other parts applies on top: TopK alone, Hybrid(Hash, TopK), Hybrid(QKDrop, TopK),
  Hybrid(QKDrop, Hash, TopK) and PerHead (dense heads use every feature);
- gradients reach only the kept entries of q and k (GQA: the union over a kv head's query
  heads), and they are the exact gradient of the composed function with the support held
  fixed (``gradcheck`` in float64 against finite differences);
- the reference and the tile executor agree on all of it (outputs and gradients).

Property tests, T <= 48; CPU only.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.patterns import get_criterion
from tilesparse.testing import assert_equivalent, attention_inputs, decisions

COMPOSED = [
    ts.TopKFeatures(k=3),
    ts.Hybrid(parts=[ts.Hash(buckets=3), ts.TopKFeatures(k=4)]),
    ts.Hybrid(parts=[ts.Hash(buckets=2, attend_self=False), ts.TopKFeatures(k=2)]),
    ts.Hybrid(parts=[ts.QKDrop(keep=0.6), ts.TopKFeatures(k=5)]),
    ts.Hybrid(parts=[ts.QKDrop(keep=0.7), ts.Hash(buckets=2), ts.TopKFeatures(k=1)]),
    ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=2)),
    ts.PerHead(dense_heads=[1], rest=ts.Hybrid(parts=[ts.Hash(buckets=2), ts.TopKFeatures(k=3)])),
]


def _topk_oracle(x: torch.Tensor, k: int) -> list[int]:
    """The k ids of largest |x|, lowest id first among equals, returned in increasing order."""
    ranked = sorted(range(len(x)), key=lambda f: (-abs(float(x[f])), f))
    return sorted(ranked[:k])


@settings(max_examples=60)
@given(data=st.data())
def test_topk_abs_keeps_the_largest_magnitudes_ties_to_the_lowest_id(data):
    D = data.draw(st.integers(1, 24))
    k = data.draw(st.integers(1, D))
    levels = data.draw(st.lists(st.sampled_from([0.0, 0.5, -0.5, 1.0, -1.0, 2.0]), min_size=D, max_size=D))
    x = torch.tensor(levels).view(1, 1, 1, D)
    qs, ks = get_criterion("topk_abs")(x, -x, k=k)
    assert qs.flatten().tolist() == _topk_oracle(x.flatten(), k)
    assert torch.equal(qs, ks), "the sign does not matter: |x| decides"


def _oracle(spec, q, k, v, dec, causal):
    """out[b, h, i] = sum_j softmax_j(s_ij) v_j with s_ij = sum over f in supp(q_i) & supp(k_j)
    of q_if k_jf * scale, over the (i, j) the spec keeps; float64, loops over (b, h, i)."""
    B, H, T, D = q.shape
    group = H // k.shape[1]
    scale = D**-0.5
    rest = spec.rest if isinstance(spec, ts.PerHead) else spec
    parts = rest.parts if isinstance(rest, ts.Hybrid) else (rest,)
    dense_heads = set(spec.dense_heads) if isinstance(spec, ts.PerHead) else set()
    out = torch.zeros((B, H, T, D), dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            kh = h // group
            for i in range(T):
                scores, values = [], []
                for j in range(T):
                    if causal and j > i:
                        continue
                    if h not in dense_heads:
                        if any(isinstance(p, ts.QKDrop) for p in parts) and not (dec.q_keep[b, h, i] and dec.k_keep[b, h, j]):
                            continue
                        hashed = [p for p in parts if isinstance(p, ts.Hash)]
                        if hashed and dec.q_bucket[b, h, i] != dec.k_bucket[b, h, j]:
                            continue
                        if hashed and not hashed[0].attend_self and i == j:
                            continue
                        common = set(dec.q_support[b, h, i].tolist()) & set(dec.k_support[b, h, j].tolist())
                    else:
                        common = set(range(D))
                    s = sum(float(q[b, h, i, f]) * float(k[b, kh, j, f]) for f in common) * scale
                    scores.append(s)
                    values.append(v[b, kh, j].double())
                if scores:
                    p = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
                    out[b, h, i] = (p[:, None] * torch.stack(values)).sum(0)
    return out


@settings(max_examples=25)
@given(data=st.data(), spec=st.sampled_from(COMPOSED), causal=st.booleans())
def test_the_reference_is_the_dot_of_the_sparsified_vectors_under_the_mask(data, spec, causal):
    q, k, v = data.draw(attention_inputs(heads=st.sampled_from([2, 4]), seqlen=st.integers(1, 12),
                                         head_dim=st.sampled_from([8, 16]), dtype=torch.float32))  # fmt: skip
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, causal=causal, backend="reference")
    ref = attn.reference(q, k, v, decisions=dec, precision=torch.float64)
    torch.testing.assert_close(ref, _oracle(spec, q.detach(), k.detach(), v.detach(), dec, causal), rtol=1e-9, atol=1e-9)


def _kept(support: torch.Tensor, D: int) -> torch.Tensor:
    return torch.zeros((*support.shape[:-1], D), dtype=torch.bool).scatter_(-1, support.long(), True)


@pytest.mark.parametrize("backend", ["reference", "executor"])
@settings(max_examples=20)
@given(data=st.data(), spec=st.sampled_from(COMPOSED), causal=st.booleans())
def test_gradients_reach_only_the_kept_entries(backend, data, spec, causal):
    q, k, v = data.draw(attention_inputs(heads=st.sampled_from([2, 4]), seqlen=st.integers(1, 48), dtype=torch.float32))
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, causal=causal, backend=backend)
    out = attn(q, k, v, decisions=dec)
    dq, dk, _ = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    B, H, T, D = q.shape
    group = H // k.shape[1]
    q_kept = _kept(dec.q_support, D)
    k_kept = _kept(dec.k_support, D)
    if isinstance(spec, ts.PerHead):
        q_kept[:, list(spec.dense_heads)] = True
        k_kept[:, list(spec.dense_heads)] = True
    k_kept = k_kept.unflatten(1, (H // group, group)).any(2)  # a kv head: any of its query heads
    assert not dq[~q_kept].any(), "dq is non-zero on a feature the query does not keep"
    assert not dk[~k_kept].any(), "dk is non-zero on a feature no query head of the kv head keeps"
    assert_equivalent(attn, q, k, v, decisions=dec)


@pytest.mark.parametrize("spec", COMPOSED, ids=str)
def test_gradients_are_those_of_the_composed_function_with_the_support_fixed(spec):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 7, 8, generator=g, requires_grad=True) for _ in range(3))
    attn = ts.compile(spec, causal=True, backend="reference")
    dec = attn.decide(q, k, generator=g)
    f = lambda q, k, v: attn.reference(q, k, v, decisions=dec, precision=torch.float64)  # noqa: E731
    # float64 leaves for finite differences (inputs are float32 by contract: pass through a cast)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    f64 = lambda a, b, c: attn.reference(a.float(), b.float(), c.float(), decisions=dec, precision=torch.float64)  # noqa: E731
    assert torch.autograd.gradcheck(f64, (q64, k64, v64), eps=1e-3, atol=2e-3, rtol=1e-2)
    # the executor's hand-written backward gives the same gradients
    ex = ts.compile(spec, causal=True, backend="executor")
    go = torch.randn(q.shape, generator=g)
    ours = torch.autograd.grad(ex(q, k, v, decisions=dec), (q, k, v), go)
    theirs = torch.autograd.grad(f(q, k, v), (q, k, v), go)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b.float(), rtol=1e-4, atol=1e-5)


def test_a_query_whose_support_misses_every_key_feature_attends_uniformly():
    """Disjoint supports give a zero score: softmax of zeros is uniform over the kept keys
    (not an empty row: the mask, not the overlap, decides which keys take part)."""
    q, k, v = (torch.randn(1, 1, 5, 8) for _ in range(3))
    dec = ts.Decisions(q_support=torch.tensor([0, 1]).expand(1, 1, 5, 2), k_support=torch.tensor([2, 3]).expand(1, 1, 5, 2))
    out = ts.compile(ts.TopKFeatures(k=2), causal=True, backend="executor")(q, k, v, decisions=dec)
    expected = v.cumsum(2) / torch.arange(1, 6).view(1, 1, 5, 1)
    torch.testing.assert_close(out, expected)
