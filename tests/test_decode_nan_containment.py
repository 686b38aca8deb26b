"""A decode step (the Triton split-K kernel under the interpreter, and the torch step) reads
only the cached keys its pattern keeps: an inf or NaN in the k or v of a cached key the query
does not keep (another bucket, a dropped key, its own position without attend_self) changes
nothing, and one in a key it keeps makes its output non-finite. CPU, 40 cached tokens.
"""

import pytest
import torch

import tilesparse as ts
from tilesparse.inference import decode_step

T, D = 40, 16


def _decode(spec, dec, k, v, q, kernel):
    attn = ts.compile(spec, backend="executor")
    cache = attn.new_cache(1, T, 1, D, heads=1)
    cut = lambda t, sl: None if t is None else t[:, :, sl]  # noqa: E731
    head, last = slice(0, T - 1), slice(T - 1, T)
    attn(q[:, :, head], k[:, :, head], v[:, :, head], cache=cache,
         decisions=ts.Decisions(**{n: cut(t, head) for n, t in dec.items()}))  # fmt: skip
    cache.append(k[:, :, last], v[:, :, last], ts.Decisions(**{n: cut(t, last) for n, t in dec.items()}))
    q_dec = ts.Decisions(**{n: cut(t, last) for n, t in dec.items() if t is not None and n.startswith("q_")})
    return decode_step(cache, q[:, :, last], q_dec, None, kernel=kernel)


def _case(kind):
    """(spec, decisions, a key the last query does not keep, a key it keeps)."""
    if kind == "hash":
        qb = torch.zeros(1, 1, T, dtype=torch.int64)
        kb = torch.zeros(1, 1, T, dtype=torch.int64)
        kb[..., 7] = 1
        return ts.Hash(buckets=2, attend_self=False), ts.Decisions(q_bucket=qb, k_bucket=kb), (7, T - 1), 3
    keep = torch.ones(1, 1, T, dtype=torch.bool)
    keep[..., 7] = False
    return ts.QKDrop(keep=0.5), ts.Decisions(q_keep=keep.clone(), k_keep=keep), (7,), 3


@pytest.mark.parametrize("kernel", ["triton", "torch"])
@pytest.mark.parametrize("kind", ["hash", "drop"])
def test_a_non_finite_key_reaches_a_decode_step_only_when_kept(kind, kernel):
    spec, dec, unkept, kept = _case(kind)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, D, generator=g) for _ in range(3))
    want = _decode(spec, dec, k, v, q, kernel)
    kp, vp = k.clone(), v.clone()
    for j in unkept:
        vp[..., j, :] = float("inf")
        kp[..., j, 2] = float("nan")
    torch.testing.assert_close(_decode(spec, dec, kp, vp, q, kernel), want, rtol=0, atol=0)
    vp[..., kept, 5] = float("nan")
    assert not torch.isfinite(_decode(spec, dec, kp, vp, q, kernel)).all()
