"""The CuPy kernels (``kernels/sfa.cu``, run in the CPU emulator) contain an inf or NaN: one in v,
or in a kept feature of k, at a key that some rows of its tile keep and others do not (the
causal diagonal tile, another bucket's rows, dropped queries) reaches only the rows that keep
it; the other rows' outputs and gradients equal the reference's on clean inputs, a dropped
query outputs zeros, and the rows that keep it (and the keys those rows keep) are not finite.
Skipped without g++. CPU, T = 96.
"""

import pytest
import torch

import tilesparse as ts
from tilesparse.testing.containment import assert_query_contained

from feature_ops import FeatureOp

emulate = pytest.importorskip("emulate")
pytestmark = pytest.mark.skipif(emulate.available() is not None, reason=str(emulate.available()))

T, J = 96, 40  # key J sits in the first 64-row tile, which rows 0..39 share without keeping it
SPECS = {
    "causal": ts.TopKFeatures(k=4),
    "hash": ts.Hybrid(parts=[ts.Hash(buckets=3), ts.TopKFeatures(k=4)]),
    "drop": ts.Hybrid(parts=[ts.QKDrop(keep=0.6), ts.TopKFeatures(k=4)]),
}


def _mask(dec) -> torch.Tensor:
    """(1, 2, T, T) element mask: causal, then the same bucket or both rows kept."""
    mask = (torch.arange(T).view(1, T) <= torch.arange(T).view(T, 1)).expand(1, 2, T, T)
    if dec.q_bucket is not None:
        mask = mask & (dec.q_bucket[..., :, None] == dec.k_bucket[..., None, :])
    if dec.q_keep is not None:
        mask = mask & dec.q_keep[..., :, None] & dec.k_keep[..., None, :]
    return mask


def _run(op, q, k, v, dec):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = op(*leaves, decisions=dec)
    out.square().sum().backward()
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("kind", sorted(SPECS))
@pytest.mark.parametrize(("tensor", "value"), [("v", float("inf")), ("v", float("nan")), ("k", float("nan"))])
def test_a_non_finite_key_reaches_only_the_rows_that_keep_it(kind, tensor, value):
    spec = SPECS[kind]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, T, 16, generator=g) for _ in range(3))
    dec = ts.compile(spec).decide(q, k, generator=g)
    if dec.k_keep is not None:
        dec = ts.Decisions(**{n: t for n, t in dec.items() if t is not None and n != "k_keep"},
                           k_keep=dec.k_keep.clone().index_fill_(2, torch.tensor([J]), True))  # fmt: skip
    mask = _mask(dec)
    op = FeatureOp(spec, causal=True, make_impl=emulate.EmulatedKernels)
    want, want_grads = _run(op.reference, q, k, v, dec)
    bad = {"k": k.clone(), "v": v.clone()}
    if tensor == "v":
        bad["v"][:, :, J, 3] = value
    else:  # a feature key J keeps (per head): the score reads it
        for h in range(2):
            bad["k"][0, h, J, dec.k_support[0, h, J, 0]] = value
    out, grads = _run(op, q, bad["k"], bad["v"], dec)

    hit = mask[..., J]
    hit_keys = (mask & hit[..., None]).any(-2)
    assert hit.any() and (~hit).any()
    torch.testing.assert_close(out[~hit], want[~hit], rtol=0, atol=2e-5)
    torch.testing.assert_close(grads[0][~hit], want_grads[0][~hit], rtol=0, atol=2e-5)
    for got, ref in zip(grads[1:], want_grads[1:], strict=True):
        torch.testing.assert_close(got[~hit_keys], ref[~hit_keys], rtol=0, atol=2e-5)
    if dec.q_keep is not None:
        assert (~dec.q_keep).any() and not out[~dec.q_keep].any()
    assert not torch.isfinite(out[hit]).all(-1).any(), "a row keeping the bad key has a finite output"
    assert not torch.isfinite(grads[2][hit_keys]).all(-1).any()


def test_a_non_finite_query_reaches_only_its_own_row_and_its_keys():
    """A NaN in a kept feature of q (so in that row's dO too) must not reach the gradients of
    the keys it does not keep (the dK/dV kernel multiplies q by zero dS there)."""
    spec = SPECS["hash"]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, T, 16, generator=g) for _ in range(3))
    dec = ts.compile(spec).decide(q, k, generator=g)
    mask = _mask(dec)
    row = int(torch.nonzero(mask[0, 0, 40:64].any(-1))[0]) + 40
    op = FeatureOp(spec, causal=True, make_impl=emulate.EmulatedKernels)
    want, want_grads = _run(op.reference, q, k, v, dec)
    bad_q = q.clone()
    bad_q[0, 0, row, dec.q_support[0, 0, row, 0]] = float("nan")
    out, grads = _run(op, bad_q, k, v, dec)
    hit = torch.zeros(1, 2, T, dtype=torch.bool)
    hit[0, 0, row] = True
    assert_query_contained(out, grads, want, want_grads, hit, mask, nonfinite_grads=(2,))
