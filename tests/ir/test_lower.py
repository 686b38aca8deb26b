"""Lowering: each spec kind's program (layout, predicates, score, head groups), and the
central property that lowering + prepare + ``to_dense()`` gives exactly the spec's mask
function (``spec.mask_mod`` plus causality, as ``tilesparse.ir.dense_mask`` builds it): bits,
not tolerances.

Property tests over ``tilesparse.testing`` specs and decisions, T from 1 to 200 with block
sizes 16 to 128 (T not a multiple of the block included); CPU only.
"""

from typing import Literal

import pytest
import torch
from hypothesis import given, settings

import tilesparse as ts
from tilesparse import ir
from tilesparse.ir import dense_mask
from tilesparse.patterns import SpecBase
from prepared_programs import prepared_programs


@settings(max_examples=60)
@given(drawn=prepared_programs([16, 32, 64, 128]))
def test_to_dense_equals_the_mask_function_exactly(drawn):
    spec, dec, causal, _, prepared = drawn
    q = torch.zeros(prepared.batch, prepared.heads, prepared.seqlen, 8)
    want = dense_mask(spec, dec, causal=causal, inputs=ir.check_inputs(q, q, q))
    if want is None:
        want = torch.ones(prepared.batch, prepared.heads, prepared.seqlen, prepared.seqlen, dtype=torch.bool)
    got = ir.to_dense(prepared)
    assert got.dtype == torch.bool and torch.equal(got, want)
    for g in prepared.groups:
        assert torch.equal(ir.to_dense(g), want[:, list(g.heads)])


C = ir.Causal()


@pytest.mark.parametrize(
    "spec, causal, layout, predicates, score, buckets",
    [
        (ts.Dense(), True, ir.Layout.IDENTITY, (C,), ir.DotScore(), 1),
        (ts.Dense(), False, ir.Layout.IDENTITY, (), ir.DotScore(), 1),
        (ts.QKDrop(), True, ir.Layout.COMPACT, (C, ir.Keep()), ir.DotScore(), 1),
        (ts.Hash(buckets=8), True, ir.Layout.SORT, (C, ir.SameBucket()), ir.DotScore(), 8),
        (
            ts.Hash(buckets=8, attend_self=False),
            True,
            ir.Layout.SORT,
            (ir.Causal(strict=True), ir.SameBucket()),
            ir.DotScore(),
            8,
        ),
        (
            ts.Hash(buckets=8, attend_self=False),
            False,
            ir.Layout.SORT,
            (ir.SameBucket(), ir.NotSelf()),
            ir.DotScore(),
            8,
        ),
        (ts.TopKFeatures(k=4), True, ir.Layout.IDENTITY, (C,), ir.FeatureDotScore(k=4), 1),
        (
            ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop(), ts.TopKFeatures(k=2)]),
            True,
            ir.Layout.COMPACT_SORT,
            (C, ir.SameBucket(), ir.Keep()),
            ir.FeatureDotScore(k=2),
            3,
        ),
    ],
    ids=lambda x: str(x) if isinstance(x, SpecBase) else None,
)
def test_each_kind_lowers_to_its_program(spec, causal, layout, predicates, score, buckets):
    program = ir.lower(spec, causal=causal)
    assert len(program.groups) == 1
    (g,) = program.groups
    assert (g.heads, g.layout, g.predicates, g.score, g.buckets) == (None, layout, predicates, score, buckets)
    assert (program.block_q, program.block_k) == (128, 128)


def test_per_head_makes_a_dense_group_and_a_rest_group():
    program = ir.lower(ts.PerHead(dense_heads=[3, 1], rest=ts.QKDrop()), causal=True, block_q=32, block_k=16)
    dense, rest = program.groups
    assert dense.heads == (1, 3) and dense.layout is ir.Layout.IDENTITY and dense.predicates == (C,)
    assert rest.heads is None and rest.layout is ir.Layout.COMPACT
    assert ir.resolve_heads(program, 5) == [(1, 3), (0, 2, 4)]
    assert (program.block_q, program.block_k) == (32, 16)
    assert program.with_blocks(64, 64).groups == program.groups
    assert program.describe().splitlines() == [
        "heads[1,3] layout=identity mask=k<=q score=dot",
        "heads[rest] layout=compact mask=k<=q & keep score=dot",
    ]
    no_dense = ir.lower(ts.PerHead(dense_heads=[], rest=ts.Hash()), causal=False)
    assert len(no_dense.groups) == 1 and no_dense.groups[0].heads is None


def test_resolve_heads_refuses_heads_out_of_range():
    program = ir.lower(ts.PerHead(dense_heads=[5], rest=ts.Hash()), causal=True)
    with pytest.raises(ValueError, match=r"head indices \[5\] are out of range for 4 query heads"):
        ir.resolve_heads(program, 4)


def test_an_unknown_spec_kind_is_refused():
    class Sliding(SpecBase):
        kind: Literal["sliding"] = "sliding"

    with pytest.raises(TypeError, match="cannot lower spec kind Sliding"):
        ir.lower(Sliding(), causal=True)
