"""What a kept group (a pool entry's views) saves its later calls: its index tensors handed to
the launches as ``launch.Fixed`` blocks, read once, and an identity layout's index tensors built
once, later calls only zeroing their non-finite flags. The op's output and gradients equal
those of the launches of the tensors one by one and of a build every call (``inline_fixed()``,
``rebuilt_identity()``), bit for bit, for every pattern kind, GQA, Tq < Tk, lengths no multiple
of a block and non-finite values; the blocks are used once the build's pool lends an entry
again; a group copied with other index tensors drops them; and the flags are zeroed every
call."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.triton import launch
from tilesparse.backends.triton.index import rebuilt_identity
from tilesparse.backends.triton.nonfinite import sanitize_in_pairs
from tilesparse.backends.triton.launch import Fixed, inline_fixed
from tilesparse.ir.prepare import copy_group
from tilesparse.testing import decisions, specs


def _fwd_bwd(attn, q, k, v, dec):
    out = attn(q, k, v, decisions=dec)
    return (out, *torch.autograd.grad(out, (q, k, v), torch.ones_like(out)))


@pytest.fixture
def fixed_launches(monkeypatch):
    """Per call of the op, how many launches were handed a Fixed block."""
    seen = []
    normal = launch.LeanKernel._normal

    def record(self, grid, args, constants):
        if seen:
            seen[-1] += sum(type(a) is Fixed for a in args)
        return normal(self, grid, args, constants)

    monkeypatch.setattr(launch.LeanKernel, "_normal", record)
    return seen


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), Tk=st.integers(1, 70), q_short=st.integers(0, 10), gqa=st.booleans(), causal=st.booleans(),
       poison=st.sampled_from([None, "inf", "nan"]))
def test_fixed_blocks_give_the_launches_of_the_tensors_bit_for_bit(
    data, Tk, q_short, gqa, causal, poison, fixed_launches
):
    """Finite inputs, and an inf or a NaN in v (each pass's non-finite flag and sanitizing
    launch, which the blocks hand over with the index tensors)."""
    Tq = max(1, Tk - q_short)
    H, Hkv = (4, 2) if gqa else (2, 2)
    spec = data.draw(specs(heads=H, kinds=("dense", "qk_drop", "hash", "topk_features", "hybrid"), max_buckets=8))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 100)))
    q = torch.randn(1, H, Tq, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(1, Hkv, Tk, 16, generator=g) for _ in range(2))
    if poison is not None:
        v[0, 0, data.draw(st.integers(0, Tk - 1)), 0] = float(poison)
    k.requires_grad_(True)
    v.requires_grad_(True)
    dec = data.draw(decisions(spec, q.shape, k_len=Tk))
    attn = ts.compile(spec, causal=causal, backend="triton")
    with inline_fixed(), rebuilt_identity():
        want = _fwd_bwd(attn, q, k, v, dec)
    fixed_launches.clear()  # the fixture's list lives across examples
    for _ in range(3):  # the pool lends an entry again from the second or third call on
        fixed_launches.append(0)
        got = _fwd_bwd(attn, q, k, v, dec)
        for w, x in zip(want, got, strict=True):
            torch.testing.assert_close(x, w, rtol=0, atol=0, equal_nan=True)
    if Tq == Tk:  # queries shorter than keys: the torch build, whose groups are the call's own
        assert fixed_launches[-1] > 0, fixed_launches


def test_a_copy_with_other_index_tensors_drops_the_kept_blocks():
    attn = ts.compile(ts.Hash(buckets=3), causal=True, backend="triton")
    x = torch.randn(1, 2, 40, 16)
    kept = {"marker": object()}
    base = copy_group(attn.prepare(x, x, x).groups[0], fixed_args=kept)
    assert copy_group(base).fixed_args is kept
    assert copy_group(base, q_support=None, k_support=None).fixed_args is kept  # not read through the blocks
    assert copy_group(base, q_order=base.q_order.clone()).fixed_args is None
    assert copy_group(base, flags=None).fixed_args is None


@pytest.mark.parametrize("spec", [ts.Dense(), ts.TopKFeatures(k=4)], ids=["dense", "topk"])
def test_an_identity_layout_is_built_once_and_its_flags_zeroed_every_call(spec, monkeypatch):
    """An identity layout's block pass runs on a pool entry's first call only; every later call
    zeroes the two non-finite flags (a fill), so a call after one that set a flag starts clear,
    and the index tensors are the ones a build every call gives."""
    names = []
    normal = launch.LeanKernel._normal

    def record(self, grid, args, constants):
        names.append(self.fn.__name__ if hasattr(self.fn, "__name__") else self.fn.fn.__name__)
        return normal(self, grid, args, constants)

    monkeypatch.setattr(launch.LeanKernel, "_normal", record)
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn((1, 2, 50, 16), generator=g) for _ in range(3))
    bad = v.clone()
    bad[0, 1, 20] = float("inf")
    attn = ts.compile(spec, causal=True, backend="triton")

    def flags() -> list[int]:
        (group,) = attn._last
        return [int(f) for f in group.flags]

    with sanitize_in_pairs():  # the forward's launch pair: its unchanged variant sets the flag
        for _ in range(3):  # the pool's entries built
            attn(q, k, v)
        names.clear()
        attn(q, k, v)
        assert "_build_sides" not in names and names, names
        attn(q, k, bad)
        assert flags() == [1, 0]
        for _ in range(3):  # the pool's entries in turn, the one that took the inf among them
            out = attn(q, k, v)
            assert flags() == [0, 0]  # zeroed by the call's fill
        (kept,) = attn._last
        with rebuilt_identity():
            want = attn(q, k, v)
            (rebuilt,) = attn._last
    assert torch.equal(out, want)
    for name in ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges",
                 "k_nseg"):
        assert torch.equal(getattr(kept, name), getattr(rebuilt, name)), name
