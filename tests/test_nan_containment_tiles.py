"""An inf or NaN in v or k at a key that some rows of a visited tile keep and others do not
(the causal diagonal tile, another bucket's rows of a Hash tile, a dropped query's row) reaches
only the rows that keep it, on every backend but SDPA: the other rows' outputs and gradients equal
the reference's on clean inputs, a dropped query still outputs zeros, and the rows that keep it
(and the gradients of the keys those rows keep) are not finite. Triton under the interpreter,
the tile executor and the reference itself; CPU, T = 96 with 32-wide tiles.
"""

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.nonfinite import sanitize_in_pairs
from tilesparse.testing.containment import assert_query_contained

T, J = 96, 40  # key J sits in the diagonal tile of rows 32..63 (32-wide CPU tiles)


def _case(kind: str):
    """(spec, decisions, (1, 2, T, T) element mask) with key J kept by some rows of its tile."""
    g = torch.Generator().manual_seed(1)
    i = torch.arange(T).view(T, 1)
    causal = torch.arange(T).view(1, T) <= i
    if kind == "causal":
        return ts.Dense(), None, causal.expand(1, 2, T, T)
    if kind == "hash":
        qb = torch.randint(0, 3, (1, 2, T), generator=g)
        kb = torch.randint(0, 3, (1, 2, T), generator=g)
        dec = ts.Decisions(q_bucket=qb, k_bucket=kb)
        return ts.Hash(buckets=3), dec, causal & (qb[..., :, None] == kb[..., None, :])
    q_keep = torch.rand(1, 2, T, generator=g) < 0.6
    k_keep = torch.rand(1, 2, T, generator=g) < 0.7
    k_keep[..., J] = True
    dec = ts.Decisions(q_keep=q_keep, k_keep=k_keep)
    return ts.QKDrop(keep=0.5), dec, causal & q_keep[..., :, None] & k_keep[..., None, :]


def _run(attn, q, k, v, dec):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, decisions=dec)
    out.square().sum().backward()  # dO = 2 * out: a row that keeps the bad key sends a bad dO too
    return out.detach(), [t.grad for t in leaves]


POISONS = [("v", float("inf")), ("v", float("nan")), ("k", float("nan")), ("k", float("inf"))]
CASES = [(kind, *p) for kind in ("causal", "hash", "drop") for p in POISONS if kind == "causal" or p[1] != p[1] or p[0] == "v"]


@pytest.mark.parametrize("backend", ["triton", "executor", "reference"])
@pytest.mark.parametrize(("kind", "tensor", "value"), CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in CASES])
def test_a_non_finite_key_reaches_only_the_rows_that_keep_it(backend, kind, tensor, value):
    spec, dec, mask = _case(kind)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, T, 16, generator=g) for _ in range(3))
    want, want_grads = _run(ts.compile(spec, backend="reference"), q, k, v, dec)
    bad = {"k": k.clone(), "v": v.clone()}
    bad[tensor][:, :, J, 3] = value
    out, grads = _run(ts.compile(spec, backend=backend), q, bad["k"], bad["v"], dec)

    hit = mask[..., J]  # (1, 2, T) rows that keep key J
    hit_keys = (mask & hit[..., None]).any(-2)  # keys some such row keeps
    assert hit.any() and (~hit).any()
    torch.testing.assert_close(out[~hit], want[~hit], rtol=0, atol=2e-5)
    torch.testing.assert_close(grads[0][~hit], want_grads[0][~hit], rtol=0, atol=2e-5)
    for got, ref in zip(grads[1:], want_grads[1:], strict=True):
        torch.testing.assert_close(got[~hit_keys], ref[~hit_keys], rtol=0, atol=2e-5)
    if kind == "drop":
        dropped = ~dec.q_keep
        assert dropped.any() and not out[dropped].any() and not grads[0][dropped].any()
    # an inf in k scores its key -inf for some rows (then they ignore it, as the reference does)
    if not (tensor == "k" and value == float("inf")):
        assert not torch.isfinite(out[hit]).all(-1).any(), "a row keeping the bad key has a finite output"
        assert not torch.isfinite(grads[0][hit]).all(-1).any()
        for got in grads[1:]:
            assert not torch.isfinite(got[hit_keys]).all(-1).any()


@pytest.mark.parametrize("backend", ["triton", "executor", "reference"])
def test_a_non_finite_query_reaches_only_its_own_row_and_its_keys(backend):
    """A NaN in q (and so in that row's dO) must not reach the gradients of keys it does not keep."""
    spec, dec, mask = _case("hash")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, T, 16, generator=g) for _ in range(3))
    row = int(torch.nonzero(mask[0, 0, 32:64].any(-1))[0]) + 32
    want, want_grads = _run(ts.compile(spec, backend="reference"), q, k, v, dec)
    bad_q = q.clone()
    bad_q[0, 0, row, 5] = float("nan")
    out, grads = _run(ts.compile(spec, backend=backend), bad_q, k, v, dec)
    hit = torch.zeros(1, 2, T, dtype=torch.bool)
    hit[0, 0, row] = True
    assert_query_contained(out, grads, want, want_grads, hit, mask)


@pytest.mark.parametrize("kind", ["hash", "drop"])
def test_containment_holds_with_dp_issued_first(kind):
    """The same containment with the dK/dV kernel's dP product issued before the exponentials
    (``TileConfig.dp_first``, on by default for drop groups at D=128 on the GPU)."""
    from tilesparse.backends.triton.op import override_config

    with override_config(dp_first=2):
        test_a_non_finite_key_reaches_only_the_rows_that_keep_it("triton", kind, "v", float("nan"))
        test_a_non_finite_query_reaches_only_its_own_row_and_its_keys("triton")


def test_the_flag_stays_clear_on_finite_inputs_and_is_set_by_a_leak():
    """Triton's protocol (backends/triton/nonfinite.py): finite inputs leave both passes' flags
    at 0 (the sanitizing variants exit at once); an inf in v at key J, which the rows before J
    in its diagonal tile do not keep, makes the unchanged forward variant store a NaN there
    and set the forward flag, and the sanitizing variant's output is contained. The forward at
    D <= 64 sanitizes in its own launch by default: it sets no flag, and its output is the
    pair's."""
    spec, dec, mask = _case("causal")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((1, 2, T, 32), generator=g) for _ in range(3))
    attn = ts.compile(spec, causal=True, backend="triton")

    def flags() -> list[int]:  # the last call's forward and backward flags, which its index build zeroed
        (group,) = attn._last
        return [int(f) for f in group.flags]

    bad = v.clone()
    bad[0, 1, J] = float("inf")
    with sanitize_in_pairs():  # every kernel's launch pair, the forward's too
        _run(attn, q, k, v, dec)
        assert flags() == [0, 0]
        out = attn(q, k, bad, decisions=dec)
        assert flags() == [1, 0]  # no backward ran
        _run(attn, q, k, v, dec)
        assert flags() == [0, 0]  # the next call's build zeroed its flags again
    want = ts.compile(spec, causal=True, backend="reference")(q, k, v, decisions=dec)
    torch.testing.assert_close(out[0, 1, :J], want[0, 1, :J], atol=1e-4, rtol=1e-4)
    assert not out[0, 1, J:].isfinite().any()
    local = attn(q, k, bad, decisions=dec)
    assert flags() == [0, 0]
    assert torch.equal(local.isnan(), out.isnan()) and torch.equal(local.nan_to_num(0.0), out.nan_to_num(0.0))
