"""Prepare: ``verify`` finds nothing wrong in any prepared program (deep tile checks included)
and does report each planted violation; the layout's documented form (stable bucket sort,
dropped rows last with their sentinels); and prepare at T = 65,536 never allocates a T x T
tensor (every op's result is measured with a TorchDispatchMode; a T x T bool mask is 4 GiB).

Property tests over ``tilesparse.testing`` specs and decisions, T <= 200; CPU only.
"""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import tilesparse as ts
from tilesparse import ir
from tilesparse.testing import decisions, specs

from prepared_programs import prepared_programs


@settings(max_examples=50)
@given(drawn=prepared_programs([16, 32, 64]))
def test_verify_finds_nothing_wrong_in_a_prepared_program(drawn):
    program, prepared = drawn.program, drawn.prepared
    assert ir.verify(program, prepared, deep=True, block_n=(16, 48, 64)) == []


@settings(max_examples=25)
@given(data=st.data(), T=st.integers(1, 150))
def test_the_api_prepares_verified_programs(data, T):
    q = torch.randn(1, 2, T, 8)
    spec = data.draw(specs(heads=2))
    attn = ts.compile(spec, causal=data.draw(st.booleans()), backend="executor")
    prepared = attn.prepare(q, q, q, decisions=data.draw(decisions(spec, q.shape)))
    assert isinstance(prepared, ir.Prepared) and (prepared.batch, prepared.heads, prepared.seqlen) == (1, 2, T)
    assert ir.verify(prepared.program, prepared, deep=True) == []


# ---------------------------------------------------------------------------------------------
# planted violations


def prepared_hash(T=100, causal=True, block=32, **spec_fields):
    """A prepared Hybrid(Hash, QKDrop) program with drops and several buckets per block."""
    spec = ts.Hybrid(parts=[ts.Hash(buckets=3, **spec_fields), ts.QKDrop(keep=0.7)])
    program = ir.lower(spec, causal=causal, block_q=block, block_k=block)
    q = torch.randn(1, 2, T, 8, generator=torch.Generator().manual_seed(0))
    dec = spec.decide(q, q, generator=torch.Generator().manual_seed(0))
    prepared = ir.prepare(program, dec, batch=1, heads=2, seqlen=T, device="cpu")
    assert ir.verify(program, prepared, deep=True) == []
    return program, prepared


def plant(prepared, **tensors):
    """``prepared`` with some of its one group's tensors replaced."""
    (g,) = prepared.groups
    return dataclasses.replace(prepared, groups=(dataclasses.replace(g, **tensors),))


def used(g, side="q"):
    """(B, Hg, nb, S) bool: the segment slots in use."""
    return torch.arange(getattr(g, f"{side}_ranges").shape[3]) < getattr(g, f"{side}_nseg").unsqueeze(-1)


def _first_used(g, side="q"):
    """(b, h, block, segment) of the first used segment with a non-empty range."""
    r = getattr(g, f"{side}_ranges")
    return tuple(int(i) for i in torch.nonzero(used(g, side) & (r[..., 3] > r[..., 0]))[0])


def corrupt(name):
    """(prepared group -> replacement tensors, the verify message expected)."""

    def with_(g, field, fn):
        t = getattr(g, field).clone()
        fn(t)
        return {field: t}

    def first_kept(g):
        return int(torch.nonzero(g.q_pos[0, 0] >= 0)[0])

    def reverse_kept(g, field):
        t, n = getattr(g, field).clone(), int((g.q_pos[0, 0] >= 0).sum())
        t[0, 0, :n] = t[0, 0, :n].flip(0)
        return t

    def last_dropped(g):
        return int(torch.nonzero(g.k_pos[0, 0] == ir.KEY_SENTINEL)[-1])

    cases = {
        "order not a permutation": (
            lambda g: with_(g, "q_order", lambda t: t[0, 0, :2].fill_(int(t[0, 0, 0]))),
            "q_order is not a permutation",
        ),
        "pos disagrees with order": (
            lambda g: with_(g, "k_pos", lambda t: t[0, 1, 0].add_(1)),
            "k_pos must equal k_order on kept rows",
        ),
        "dropped key without its sentinel": (
            lambda g: with_(
                g, "k_pos", lambda t: t[0, 0, last_dropped(g)].fill_(int(g.k_order[0, 0, last_dropped(g)]))
            ),
            "k: a kept row follows a dropped row",
        ),
        "kept query given the sentinel": (
            lambda g: with_(g, "q_pos", lambda t: t[0, 0, first_kept(g)].fill_(ir.QUERY_SENTINEL)),
            "q: a kept row follows a dropped row",
        ),
        "dropped query given a position": (
            lambda g: with_(g, "q_pos", lambda t: t[0, 0, -1].fill_(int(g.q_order[0, 0, -1]) + 1)),
            "q_pos must equal q_order on kept rows and -1 on dropped ones",
        ),
        "rows out of bucket order": (
            lambda g: {n: reverse_kept(g, n) for n in ("q_order", "q_pos", "q_bucket")},
            "q: kept rows are not ordered by (bucket, position)",
        ),
        "bucket out of range": (
            lambda g: with_(g, "k_bucket", lambda t: t[0, 0, 0].fill_(7)),
            "k_bucket out of [0, 3) on a kept row",
        ),
        "wrong index dtype": (lambda g: {"q_pos": g.q_pos.long()}, "q_pos must be contiguous int32"),
        "range beyond T": (
            lambda g: with_(g, "q_ranges", lambda t: t[(*_first_used(g), 3)].fill_(g.seqlen + 1)),
            "q_ranges must satisfy 0 <= lo <= full_lo <= full_hi <= hi <= T",
        ),
        "block whose ranges skip kept elements": (
            lambda g: with_(g, "q_ranges", lambda t: t[_first_used(g)[:3]].fill_(0)),
            "forward query-block tiles (32x32): ",
        ),
        "backward block whose ranges skip kept elements": (
            lambda g: with_(g, "k_ranges", lambda t: t[_first_used(g, "k")[:3]].fill_(0)),
            "backward key-block tiles (32x32): ",
        ),
        "garbage in an unused segment slot": (
            lambda g: with_(g, "k_ranges", lambda t: t[0, 0, 0, -1].fill_(1)),
            "k_ranges: unused segment slots must be zero",
        ),
        "segment count beyond the slots": (
            lambda g: with_(g, "q_nseg", lambda t: t[0, 0, 0].fill_(99)),
            "q_nseg must be (B, Hg, nb) within [0, 3]",
        ),
        "partial tile run without the mask": (
            lambda g: with_(
                g,
                "q_ranges",
                lambda t: t.copy_(torch.where(used(g).unsqueeze(-1), torch.tensor([0, 0, g.seqlen, g.seqlen]), t)),
            ),
            "run without the mask but are not full",
        ),
    }
    return cases[name]


@pytest.mark.parametrize(
    "name",
    [
        "order not a permutation",
        "pos disagrees with order",
        "dropped key without its sentinel",
        "kept query given the sentinel",
        "dropped query given a position",
        "rows out of bucket order",
        "bucket out of range",
        "wrong index dtype",
        "range beyond T",
        "block whose ranges skip kept elements",
        "backward block whose ranges skip kept elements",
        "garbage in an unused segment slot",
        "segment count beyond the slots",
        "partial tile run without the mask",
    ],
)
def test_verify_reports_a_planted_violation(name):
    program, prepared = prepared_hash()
    make, says = corrupt(name)
    (g,) = prepared.groups
    errors = ir.verify(program, plant(prepared, **make(g)), deep=True)
    assert any(says in e for e in errors), errors
    assert ir.verify(program, prepared, deep=True) == [], "planting must not touch the original"


def test_verify_reports_heads_left_out_and_a_foreign_program():
    program, prepared = prepared_hash()
    one_head = dataclasses.replace(prepared, heads=3)
    assert any("groups cover heads [0, 1], expected each of 0..2 once" in e for e in ir.verify(program, one_head))
    other = ir.lower(ts.Hash(buckets=3), causal=True)
    assert "prepared.program is not the program given" in ir.verify(other, prepared)


def test_verify_checks_full_tiles_at_every_width_asked():
    # a dense causal program has full tiles below the diagonal; claiming the diagonal block
    # full is wrong at any width
    program = ir.lower(ts.Dense(), causal=True, block_q=32, block_k=32)
    prepared = ir.prepare(program, ts.Decisions(), batch=1, heads=1, seqlen=96, device="cpu")
    assert ir.verify(program, prepared, deep=True, block_n=(16, 32, 64)) == []
    (g,) = prepared.groups
    ranges = g.q_ranges.clone()
    ranges[..., 2] = ranges[..., 3]  # full_hi = hi: the diagonal tile claimed full
    errors = ir.verify(program, plant(prepared, q_ranges=ranges), deep=True, block_n=(16, 64))
    assert any("(32x16)" in e and "not full" in e for e in errors), errors
    assert any("(32x64)" in e and "not full" in e for e in errors), errors


# ---------------------------------------------------------------------------------------------
# the layout


def test_layout_is_a_stable_bucket_sort_with_dropped_rows_last():
    T = 20
    qb = torch.tensor([2, 0, 1, 0, 2, 1, 0, 0, 2, 1, 1, 0, 2, 2, 0, 1, 0, 2, 1, 0]).view(1, 1, T)
    keep = torch.ones(1, 1, T, dtype=torch.bool)
    keep[..., [1, 4, 5, 19]] = False
    dec = ts.Decisions(q_bucket=qb, k_bucket=qb, q_keep=keep, k_keep=keep)
    program = ir.lower(ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop()]), causal=True, block_q=16, block_k=16)
    (g,) = ir.prepare(program, dec, batch=1, heads=1, seqlen=T, device="cpu").groups
    kept = [i for i in range(T) if keep[0, 0, i]]
    want = sorted(kept, key=lambda i: (int(qb[0, 0, i]), i)) + [1, 4, 5, 19]
    assert g.q_order[0, 0].tolist() == want == g.k_order[0, 0].tolist()
    assert g.q_pos[0, 0].tolist() == want[:16] + [ir.QUERY_SENTINEL] * 4
    assert g.k_pos[0, 0].tolist() == want[:16] + [ir.KEY_SENTINEL] * 4
    assert g.q_bucket[0, 0].tolist() == [int(qb[0, 0, i]) for i in want[:16]] + [-1] * 4
    assert g.k_bucket[0, 0].tolist() == [int(qb[0, 0, i]) for i in want[:16]] + [-2] * 4
    assert g.q_nseg.tolist() == [[[3, 0]]], "block 0: the kept rows, buckets 0, 1, 2; block 1: dropped rows only"


def test_identity_layout_keeps_every_row_in_place():
    program = ir.lower(ts.TopKFeatures(k=2), causal=True, block_q=16, block_k=16)
    sup = torch.tensor([3, 1]).expand(1, 2, 40, 2)
    (g,) = ir.prepare(
        program, ts.Decisions(q_support=sup, k_support=sup), batch=1, heads=2, seqlen=40, device="cpu"
    ).groups
    assert torch.equal(g.q_order, torch.arange(40, dtype=torch.int32).expand(1, 2, 40))
    assert torch.equal(g.k_pos, g.k_order) and g.q_support.dtype == torch.int32
    assert "B=1, Hg=2, T=40" in repr(g)


# ---------------------------------------------------------------------------------------------
# memory


class LargestResult(TorchDispatchMode):
    """Records the largest storage any op produces while active."""

    def __init__(self):
        super().__init__()
        self.bytes, self.op = 0, None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and (n := t.untyped_storage().nbytes()) > self.bytes:
                self.bytes, self.op = n, func
        return out


@pytest.mark.parametrize(
    "spec, causal",
    [
        (ts.Hash(buckets=16), True),
        (ts.Hash(buckets=64, attend_self=False), False),
        (ts.QKDrop(keep=0.5), True),
        (ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.5), ts.TopKFeatures(k=4)]), True),
        (ts.PerHead(dense_heads=[0], rest=ts.Hash()), True),
    ],
    ids=str,
)
def test_prepare_at_65536_allocates_no_t_by_t_tensor(spec, causal):
    T = 65_536
    H = 2 if isinstance(spec, ts.PerHead) else 1
    x = torch.randn(1, H, T, 8, generator=torch.Generator().manual_seed(0))
    dec = spec.decide(x, x, generator=torch.Generator().manual_seed(0))
    program = ir.lower(spec, causal=causal)
    with LargestResult() as largest:
        prepared = ir.prepare(program, dec, batch=1, heads=H, seqlen=T, device="cpu")
    assert largest.op is not None, "the dispatch mode saw no op: the measurement is broken"
    # O(T) tensors are at most a few MiB here; T x T bools would be 4 GiB
    assert largest.bytes <= 16 * 2**20, f"{largest.op} produced {largest.bytes} bytes"
    assert ir.verify(program, prepared) == []


def test_the_allocation_check_sees_a_t_by_t_tensor():
    T = 4096
    with LargestResult() as largest:
        causal = torch.arange(T).view(T, 1) >= torch.arange(T).view(1, T)
    assert largest.bytes >= T * T and causal.shape == (T, T)
