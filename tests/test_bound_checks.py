"""Given ids checked on the device through an op's bound checks
(:class:`tilesparse.patterns.decision_errors.BoundChecks`) behave as the per-call path that
:func:`~tilesparse.patterns.decision_errors.unbound_checks` restores: a bad bucket or feature id
gives a NaN output and gradients and a ValueError at the next call or from ``check_errors()``,
and a good call gives the same output and gradients bit for bit either way. The layout-only
work (the fields' checks and launch arguments) happens once per layout, and a bound check keeps
no ids. CPU, Triton interpreted, with the device path of the checks (``DEFERRED_DEVICES``).
"""

from __future__ import annotations

import contextlib
import gc
import weakref

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton import idcheck
from tilesparse.patterns import decision_errors
from tilesparse.patterns.decision_errors import unbound_checks

SPECS = {
    "hash": ts.Hash(buckets=4),
    "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.7)]),
    "topk": ts.TopKFeatures(k=4),
    "perhead": ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=4)),
}
SWITCH = {"bound": contextlib.nullcontext, "unbound": unbound_checks}


@pytest.fixture(autouse=True)
def device_checks(monkeypatch):
    """validate=True's device path on the CPU, as on CUDA; no error left recorded by an earlier
    test (a failed one keeps its op alive)."""
    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    for _ in range(100):
        try:
            ts.check_errors()
            break
        except ValueError:
            continue


def _inputs(seed=0, T=48, H=2, D=16):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, H, T, D, generator=g, requires_grad=True) for _ in range(3))


def _given(dec: ts.Decisions) -> ts.Decisions:
    """Clones: untrusted, so every id is checked."""
    return ts.Decisions(**{n: t.clone() for n, t in dec.items() if t is not None})


def _grads(attn, q, k, v, dec):
    out = attn(q, k, v, decisions=dec)
    return (out, *torch.autograd.grad(out.square().sum(), (q, k, v)))


# a bad id per field kind: (spec, field, where, value, the error's message)
BAD = {
    "bucket": ("hash", "k_bucket", (0, 1, 7), 1000, r"decisions\.k_bucket values must lie in \[0, 4\), got \[0, 1000\]"),
    "hybrid-bucket": ("hybrid", "q_bucket", (0, 0, 3), -1, r"decisions\.q_bucket values must lie in \[0, 4\), got \[-1, 3\]"),
    "feature": ("topk", "q_support", (0, 1, 5, 2), 16, r"decisions\.q_support values must lie in \[0, 16\), got \[0, 16\]"),
}


@pytest.mark.parametrize("report", ["next_call", "check_errors"])
@pytest.mark.parametrize("switch", list(SWITCH))
@pytest.mark.parametrize("bad", list(BAD))
def test_a_bad_id_gives_nan_then_a_clear_error_either_way(bad, switch, report):
    name, field, where, value, message = BAD[bad]
    attn = ts.compile(SPECS[name], backend="triton")
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    with SWITCH[switch]():
        _grads(attn, q, k, v, _given(dec))  # warm: the layout bound (or not) with good ids
        given = _given(dec)
        getattr(given, field)[where] = value
        out, *grads = _grads(attn, q, k, v, given)
        assert out.isnan().all()
        assert all(g.isnan().any() for g in grads)
        with pytest.raises(ValueError, match=message):
            if report == "next_call":
                attn(q, k, v, decisions=_given(dec))
            else:
                ts.check_errors()
        ts.check_errors()  # raised once, then forgotten
        good = attn(q, k, v, decisions=_given(dec))
    torch.testing.assert_close(good, attn.reference(q, k, v, decisions=dec))


@pytest.mark.parametrize("name", list(SPECS))
def test_outputs_and_gradients_are_the_same_bound_and_unbound(name):
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    q, k, v = _inputs(seed=1)
    dec = attn.decide(q, k)
    results = {}
    for switch in ("unbound", "bound", "unbound", "bound"):  # each way after the other: the record is shared
        with SWITCH[switch]():
            results.setdefault(switch, []).append(_grads(attn, q, k, v, _given(dec)))
    first = results["unbound"][0]
    for got in (*results["unbound"][1:], *results["bound"]):
        for a, b in zip(first, got, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(first[0], attn.reference(q, k, v, decisions=dec))
    ts.check_errors()  # nothing recorded


def test_the_layout_work_is_done_once_per_layout(monkeypatch):
    """The fields' checks and launch arguments (``_field_args``) run at a layout's first call
    only; a strided view of the ids is a layout of its own, checked and bound anew, and gives
    the same output."""
    worked = []
    real = idcheck._field_args
    monkeypatch.setattr(idcheck, "_field_args", lambda f: worked.append(1) or real(f))
    attn = ts.compile(SPECS["hash"], backend="triton")
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    for _ in range(3):
        out = attn(q, k, v, decisions=_given(dec))
    assert len(worked) == 2 and len(attn._checks.by_layout) == 1  # two fields, bound once
    strided = torch.zeros((1, 2, 48, 2), dtype=dec.k_bucket.dtype)
    strided[..., 1] = dec.k_bucket
    given = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=strided[..., 1])
    torch.testing.assert_close(attn(q, k, v, decisions=given), out, rtol=0, atol=0)
    assert len(worked) == 4 and len(attn._checks.by_layout) == 2
    with unbound_checks():
        attn(q, k, v, decisions=_given(dec))
    assert len(worked) == 6  # the per-call path works it out every call


def test_a_new_length_binds_anew_and_still_checks():
    attn = ts.compile(SPECS["hash"], backend="triton")
    for T in (48, 32):
        q, k, v = _inputs(T=T)
        dec = attn.decide(q, k)
        torch.testing.assert_close(attn(q, k, v, decisions=_given(dec)), attn.reference(q, k, v, decisions=dec))
    bad = _given(dec)
    bad.q_bucket[0, 0, 31] = 4
    assert attn(q, k, v, decisions=bad).isnan().all()
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 4\), got \[0, 4\]"):
        ts.check_errors()


def test_a_bound_check_keeps_no_ids():
    attn = ts.compile(SPECS["topk"], backend="triton")
    q, k, v = _inputs()
    given = _given(attn.decide(q, k))
    attn(q, k, v, decisions=given)
    alive = [weakref.ref(t) for _, t in given.items() if t is not None]
    del given
    gc.collect()
    assert len(attn._checks.by_layout) == 1 and not any(r() is not None for r in alive)
