"""Fewer sanitizing launches (``backends/triton/nonfinite.py``), against the launch pairs they
replace (each kernel's unchanged variant, then its sanitizing one):

- ``local``: the Triton forward at D <= 64 sanitizes in its own launch (``LOCAL_SANITIZE``:
  only the programs whose own output is not finite compute again), the default on calls of at
  most ``LOCAL_MAX_KEYS`` keys; ``sanitize_in_pairs()`` brings its pair back;
- ``merged``: inside ``merged_sanitize()`` the backward's two sanitizing variants run in one
  launch (``kernels._attn_bwd_sanitize``), after both unchanged ones (off by default).

Each takes a launch fewer and gives bit for bit the pairs' output, lse and gradients, on finite
inputs and on inputs holding an inf or NaN at a key (or query) some rows of a visited tile keep
and others do not, with grouped-query attention too. CPU, under the interpreter; the GPU's own
check is in tests/gpu/test_nan_containment_gpu.py.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from triton.runtime.interpreter import InterpretedFunction

import tilesparse as ts
from tilesparse.backends.triton.nonfinite import merged_sanitize, sanitize_in_pairs

# the contexts that give each arm; the launch pairs (every kernel's) are sanitize_in_pairs()'s
SWITCHES = {"local": (), "merged": (sanitize_in_pairs, merged_sanitize), "both": (merged_sanitize,)}


@contextlib.contextmanager
def switched(name: str):
    with contextlib.ExitStack() as stack:
        for on in SWITCHES[name]:
            stack.enter_context(on())
        yield


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit, NaN and infinities in the same places."""
    same_nan = torch.equal(a.isnan(), b.isnan())
    return a.shape == b.shape and same_nan and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def _run(spec, q, k, v, dec):
    attn = ts.compile(spec, causal=True, backend="triton")
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out, lse = attn(*leaves, decisions=dec, return_lse=True)
    out.square().sum().backward()  # dO = 2 * out: a row that keeps the bad key sends a bad dO too
    return [out.detach(), lse.detach(), *(t.grad for t in leaves)]


def _case(kind: str, T: int, heads: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "dense":
        return ts.Dense(), None
    if kind == "hash":
        qb, kb = (torch.randint(0, 3, (1, heads, T), generator=g) for _ in range(2))
        return ts.Hash(buckets=3), ts.Decisions(q_bucket=qb, k_bucket=kb)
    q_keep, k_keep = (torch.rand(1, heads, T, generator=g) < 0.6 for _ in range(2))
    return ts.QKDrop(keep=0.5), ts.Decisions(q_keep=q_keep, k_keep=k_keep)


@pytest.fixture
def launched(monkeypatch):
    """The names of the Triton kernels launched, in order."""
    names: list[str] = []
    real = InterpretedFunction.run

    def counted(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", counted)
    return names


@pytest.mark.parametrize("D,local", [(16, True), (64, True), (128, False)])
def test_the_forward_launches_once_where_it_sanitizes_locally(launched, D, local):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 40, D, generator=g) for _ in range(3))
    spec, dec = _case("hash", 40, 2, 1)
    attn = ts.compile(spec, causal=True, backend="triton")
    with sanitize_in_pairs():
        pair = attn(q, k, v, decisions=dec)
    paired = launched.count("_attn_fwd")
    launched.clear()
    out = attn(q, k, v, decisions=dec)
    assert paired == 2
    assert launched.count("_attn_fwd") == (1 if local else 2)
    assert _same(out, pair)


@pytest.mark.parametrize("Tk,local", [(40, True), (41, False)])
def test_calls_of_more_keys_keep_the_forward_pair(launched, monkeypatch, Tk, local):
    """Past ``LOCAL_MAX_KEYS`` keys (made 40 here; 20 queries) the forward launches its pair:
    its kernels take longer in one launch than the pair's two (nonfinite.py)."""
    from tilesparse.backends.triton import op

    monkeypatch.setattr(op, "LOCAL_MAX_KEYS", 40)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 20, 16, generator=g)
    k, v = (torch.randn(1, 2, Tk, 16, generator=g) for _ in range(2))
    dec = ts.Decisions(q_keep=torch.rand(1, 2, 20, generator=g) < 0.6, k_keep=torch.rand(1, 2, Tk, generator=g) < 0.6)
    spec = ts.QKDrop(keep=0.5)
    out = ts.compile(spec, causal=True, backend="triton")(q, k, v, decisions=dec)
    assert launched.count("_attn_fwd") == (1 if local else 2)
    with sanitize_in_pairs():
        assert _same(out, ts.compile(spec, causal=True, backend="triton")(q, k, v, decisions=dec))


def test_the_backward_launches_both_sanitizing_variants_at_once(launched):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 40, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 2, 40, 16, generator=g, requires_grad=True) for _ in range(2))
    spec, dec = _case("hash", 40, 4, 1)
    attn = ts.compile(spec, causal=True, backend="triton")
    go = torch.randn(q.shape, generator=g)
    counts, grads = [], []
    for merged in (False, True):
        launched.clear()
        with merged_sanitize() if merged else contextlib.nullcontext():
            grads.append(torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go))
        counts.append({n: launched.count(n) for n in ("_attn_bwd_dq", "_attn_bwd_dkdv", "_attn_bwd_sanitize")})
    assert counts == [{"_attn_bwd_dq": 2, "_attn_bwd_dkdv": 2, "_attn_bwd_sanitize": 0},
                      {"_attn_bwd_dq": 1, "_attn_bwd_dkdv": 1, "_attn_bwd_sanitize": 1}]
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))


POISONS = [("v", float("inf")), ("v", float("nan")), ("k", float("nan")), ("k", float("inf")), ("q", float("nan"))]


@settings(max_examples=16, derandomize=True, deadline=None, database=None)
@given(
    switch=st.sampled_from(sorted(SWITCHES)),
    kind=st.sampled_from(["dense", "hash", "drop"]),
    poison=st.sampled_from(POISONS),
    T=st.integers(1, 100),
    row=st.integers(0, 99),
    kv_heads=st.integers(1, 2),
    group=st.integers(1, 2),
    D=st.sampled_from([16, 64]),
    seed=st.integers(0, 2**16),
)
def test_fewer_sanitizing_launches_equal_the_launch_pairs(switch, kind, poison, T, row, kv_heads, group, D, seed):
    heads = kv_heads * group
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, T, D, generator=g)
    k, v = (torch.randn(1, kv_heads, T, D, generator=g) for _ in range(2))
    spec, dec = _case(kind, T, heads, seed)
    tensor, value = poison
    bad = {"q": q.clone(), "k": k.clone(), "v": v.clone()}
    bad[tensor][0, bad[tensor].shape[1] - 1, row % T, 3] = value
    with sanitize_in_pairs():
        want = _run(spec, bad["q"], bad["k"], bad["v"], dec)
    with switched(switch):
        got = _run(spec, bad["q"], bad["k"], bad["v"], dec)
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, want, strict=True):
        assert _same(a, b), name


@pytest.mark.parametrize("switch", sorted(SWITCHES))
def test_fewer_sanitizing_launches_equal_the_launch_pairs_on_finite_inputs(switch):
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 70, 64, generator=g) for _ in range(3))
    for kind in ("dense", "hash", "drop"):
        spec, dec = _case(kind, 70, 2, 5)
        with sanitize_in_pairs():
            want = _run(spec, q, k, v, dec)
        with switched(switch):
            got = _run(spec, q, k, v, dec)
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True)), kind
