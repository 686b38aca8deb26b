"""NaN containment in the compiled kernels on the GPU (run with TRITON_INTERPRET=0): an inf or
NaN in v or k at a key that some rows of its tiles keep and others do not reaches only the rows
that keep it, in the Triton kernels (forward, dQ, dK/dV; fp16 and bf16, D 64 and 128; the
sanitizing variants run only then) and, for TopKFeatures, in the CuPy kernels and Triton's; the other rows'
outputs and gradients equal the reference's on clean inputs, and the rows that keep it are
not finite. With finite inputs the sanitizing variants exit at once and the result is the one
the unchanged kernels give, bit for bit. Fewer sanitizing launches (nonfinite.py: the forward at
D <= 64 in one launch, the default; ``merged_sanitize``: the backward's two sanitizing variants
in one) give the launch pairs' results (``sanitize_in_pairs``) bit for bit.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import tilesparse as ts

DEVICE = torch.device("cuda")
T, J = 1024, 300


def _setup(spec, dtype, D, seed=0):
    g = torch.Generator(DEVICE).manual_seed(seed)
    q, k, v = (torch.randn((1, 2, T, D), generator=g, device=DEVICE).to(dtype) for _ in range(3))
    dec = ts.compile(spec).decide(q, k, generator=torch.Generator(DEVICE).manual_seed(seed))
    if dec.k_keep is not None:  # key J kept: some rows keep it, dropped and earlier rows do not
        dec = ts.Decisions(**{n: t for n, t in dec.items() if t is not None and n != "k_keep"},
                           k_keep=dec.k_keep.clone().index_fill_(2, torch.tensor([J], device=DEVICE), True))  # fmt: skip
    return q, k, v, dec


def _mask(dec) -> torch.Tensor:
    i = torch.arange(T, device=DEVICE)
    mask = (i.view(1, T) <= i.view(T, 1)).expand(1, 2, T, T)
    if dec.q_bucket is not None:
        mask = mask & (dec.q_bucket[..., :, None] == dec.k_bucket[..., None, :])
    if dec.q_keep is not None:
        mask = mask & dec.q_keep[..., :, None] & dec.k_keep[..., None, :]
    return mask


def _run(attn, q, k, v, dec, w):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, decisions=dec)
    (out.float() * w).square().sum().backward()
    return out.detach().float(), [t.grad.float() for t in leaves]


def _check(spec, backend, dtype, D, tensor, value, feature_key=False):
    q, k, v, dec = _setup(spec, dtype, D)
    w = torch.rand((1, 2, T, D), device=DEVICE)
    want, want_grads = _run(ts.compile(spec, backend="reference"), q.float(), k.float(), v.float(), dec, w)
    bad = {"k": k.clone(), "v": v.clone()}
    if tensor == "v":
        bad["v"][:, :, J, 3] = value
    elif feature_key:  # a feature key J keeps: the feature score reads it
        for h in range(2):
            bad["k"][0, h, J, dec.k_support[0, h, J, 0]] = value
    else:
        bad["k"][:, :, J, 3] = value
    out, grads = _run(ts.compile(spec, backend=backend), q, bad["k"], bad["v"], dec, w)
    mask = _mask(dec)
    hit = mask[..., J]
    hit_keys = (mask & hit[..., None]).any(-2)
    assert hit.any() and (~hit).any()
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    torch.testing.assert_close(out[~hit], want[~hit], rtol=tol, atol=tol)
    torch.testing.assert_close(grads[0][~hit], want_grads[0][~hit], rtol=tol, atol=tol)
    for got, ref in zip(grads[1:], want_grads[1:], strict=True):
        torch.testing.assert_close(got[~hit_keys], ref[~hit_keys], rtol=tol, atol=tol)
    if dec.q_keep is not None:
        assert not out[~dec.q_keep].any()
    assert not torch.isfinite(out[hit]).all(-1).any()
    assert not torch.isfinite(grads[2][hit_keys]).all(-1).any()


SPECS = [ts.Dense(), ts.Hash(buckets=4), ts.QKDrop(keep=0.5)]


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("dtype,D", [(torch.float16, 64), (torch.bfloat16, 128)], ids=["fp16-64", "bf16-128"])
@pytest.mark.parametrize("tensor,value", [("v", float("inf")), ("k", float("nan"))], ids=["v-inf", "k-nan"])
def test_triton_contains_a_non_finite_key(spec, dtype, D, tensor, value):
    _check(spec, "triton", dtype, D, tensor, value)


@pytest.mark.parametrize("spec", [ts.TopKFeatures(k=8), ts.Hybrid(parts=[ts.Hash(buckets=4), ts.TopKFeatures(k=8)])], ids=str)
@pytest.mark.parametrize("tensor,value", [("v", float("inf")), ("k", float("nan"))], ids=["v-inf", "k-nan"])
@pytest.mark.parametrize("backend", ["cupy", "triton"])
def test_feature_groups_contain_a_non_finite_key(spec, tensor, value, backend):
    _check(spec, backend, torch.float16, 64, tensor, value, feature_key=True)


def _flags(attn) -> list[int]:
    """The last call's two non-finite flags (nonfinite.py), the forward's then the backward's,
    which its index build zeroed (``PreparedGroup.flags``)."""
    (group,) = attn._last
    return [int(f) for f in group.flags]


@pytest.mark.parametrize("dtype,D", [(torch.float16, 64), (torch.bfloat16, 128)], ids=["fp16-64", "bf16-128"])
def test_finite_inputs_take_the_unchanged_kernels(dtype, D, monkeypatch):
    """Finite inputs leave both passes' flags at 0 and give bit for bit what the unchanged
    variants alone give (the sanitizing launches exit at once); an inf in v at a key that
    earlier rows of its diagonal tile do not keep sets the forward pass's flag."""
    from tilesparse.backends.triton import op
    from tilesparse.backends.triton.nonfinite import sanitize_in_pairs

    q, k, v, dec = _setup(ts.Hash(buckets=4), dtype, D)
    attn = ts.compile(ts.Hash(buckets=4), backend="triton")
    w = torch.rand((1, 2, T, D), device=DEVICE)
    a, ga = _run(attn, q, k, v, dec, w)
    assert _flags(attn) == [0, 0]
    with monkeypatch.context() as m:
        # the unchanged variant alone (for dK/dV the warp-specialized kernel, where it runs)
        def unchanged_alone(kernel, launch, tensors, rest, scalars, sanitize=True):
            return (launch.unchanged or launch.site(kernel))(tensors, rest, scalars)

        m.setattr(op, "launch_pair", unchanged_alone)
        b, gb = _run(attn, q, k, v, dec, w)
    assert torch.isfinite(a).all() and torch.equal(a, b) and all(torch.equal(x, y) for x, y in zip(ga, gb, strict=True))
    x = v.clone()
    x[0, 1, J] = float("inf")
    dense = ts.compile(ts.Dense(), causal=True, backend="triton")
    with sanitize_in_pairs():  # the forward's launch pair at D <= 64 too (by default one launch, no flag)
        dense(q, k, x)
        assert _flags(dense) == [1, 0]  # the forward's set; no backward ran
        dense(q, k, v)
        assert _flags(dense) == [0, 0]  # the next call's build zeroed them again


@pytest.mark.parametrize("backend", ["cupy", "triton"])
@pytest.mark.parametrize("value", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_an_unkept_feature_stays_out(backend, value):
    """An inf or NaN in a feature a token's support leaves out (of q and of k) reaches nothing:
    every output and gradient equals the reference's on clean inputs (the reference reads q~
    and k~ through ``where``; a product would turn it into NaN)."""
    spec = ts.TopKFeatures(k=8)
    q, k, v, dec = _setup(spec, torch.float16, 64)
    w = torch.rand((1, 2, T, 64), device=DEVICE)
    want, want_grads = _run(ts.compile(spec, backend="reference"), q.float(), k.float(), v.float(), dec, w)
    bad_q, bad_k = q.clone(), k.clone()
    for t, support in ((bad_q, dec.q_support), (bad_k, dec.k_support)):
        for h in range(2):
            kept = torch.zeros(64, dtype=torch.bool, device=DEVICE)
            kept[support[0, h, J].long()] = True
            t[0, h, J, int((~kept).nonzero()[0])] = value
    out, grads = _run(ts.compile(spec, backend=backend), bad_q, bad_k, v, dec, w)
    torch.testing.assert_close(out, want, rtol=2e-2, atol=2e-2)
    for got, ref in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("spec", SPECS, ids=str)
@pytest.mark.parametrize("switch,dtype,D", [("local", torch.float16, 64), ("local", torch.bfloat16, 64),
                                            ("merged", torch.bfloat16, 64), ("merged", torch.bfloat16, 128)],
                         ids=["local-fp16-64", "local-bf16-64", "merged-bf16-64", "merged-bf16-128"])
@pytest.mark.parametrize("tensor,value", [(None, None), ("v", float("inf")), ("k", float("nan"))],
                         ids=["finite", "v-inf", "k-nan"])
def test_fewer_sanitizing_launches_equal_the_launch_pairs(spec, switch, dtype, D, tensor, value):
    """The forward at D=64 in one launch that sanitizes where a program's own output is not
    finite (``local``, the default), and with it the backward's two sanitizing variants in one
    launch after the unchanged ones (``merged``; at D=128 after the warp-specialized dQ and
    dK/dV kernels):
    output, lse and gradients bit for bit those of the launch pairs they replace (at D=128 with
    an inf or NaN, dK and dV to rounding: see below)."""
    from tilesparse.backends.triton.nonfinite import merged_sanitize, sanitize_in_pairs

    q, k, v, dec = _setup(spec, dtype, D)
    if tensor is not None:
        (k if tensor == "k" else v)[:, :, J, 3] = value
    w = torch.rand((1, 2, T, D), device=DEVICE)

    def run():
        attn = ts.compile(spec, backend="triton")
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, lse = attn(*leaves, decisions=dec, return_lse=True)
        (out.float() * w).square().sum().backward()
        return [out.detach(), lse.detach(), *(t.grad for t in leaves)]

    with sanitize_in_pairs():  # every kernel's launch pair
        want = run()
    with contextlib.nullcontext() if switch == "local" else merged_sanitize():  # local: the default
        got = run()
    for name, a, b in zip(("out", "lse", "dq", "dk", "dv"), got, want, strict=True):
        assert torch.equal(a.isnan(), b.isnan()), name
        if D == 128 and tensor is not None and name in ("dk", "dv"):
            # the merged dK/dV programs read the warp-specialized dQ kernel's delta, the pair's
            # sanitizing dK/dV variant the Triton dQ variant's: the same sum, maybe not the same bits
            torch.testing.assert_close(a.nan_to_num(0.0), b.nan_to_num(0.0), rtol=1e-2, atol=1e-2)
        else:
            assert torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)), name
    if tensor is not None:
        assert not got[0].isfinite().all() and got[0][:, :, :J].isfinite().all()
