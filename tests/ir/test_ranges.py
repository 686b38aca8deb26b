"""Ranges and tiles: the block arithmetic of ``tile_intervals``; the intervals cover every kept
element (forward and backward, several tile widths); and they are tight: on random
Hash(buckets=16) and QKDrop(keep=0.5) decisions at T = 16,384 (B=1, H=2, 128-wide blocks)
the visited tiles are at most 1.05x the ideal count (tiles holding a kept element), forward
(query blocks x key tiles) and backward (key blocks x query tiles).

At T = 16,384 the ideal count comes from ``ideal_tiles_fast`` (per block and bucket position
extrema, O(T)); a property test holds it equal to ``tilesparse.ir.ideal_tiles`` (which scans
T x block masks: seconds per call at this size) on small random cases. Also the inspection
tools on a case whose tile map is known. CPU only.
"""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.ir.inspect import EMPTY, FULL, PARTIAL
from tilesparse.testing import decisions, specs


def test_tile_intervals_round_outward_and_skip_tiles_already_visited():
    ranges = torch.tensor([[0, 0, 64, 80], [70, 70, 70, 100], [5, 5, 5, 9]], dtype=torch.int32)
    iv = ir.tile_intervals(ranges, torch.tensor(2), 32)
    # segment 0: rows [0, 80) -> tiles [0, 3), full rows [0, 64) -> tiles [0, 2)
    # segment 1: rows [70, 100) -> tiles [2, 4), but tile 2 was visited by segment 0
    # slot 2 is unused: zero
    assert iv.tolist() == [[0, 0, 2, 3], [3, 3, 3, 4], [0, 0, 0, 0]]
    visited, unmasked = ir.visited_tiles(ranges, torch.tensor(2), 32, 5)
    assert visited.tolist() == [True, True, True, True, False]
    assert unmasked.tolist() == [True, True, False, False, False]


def test_tile_intervals_shrink_full_tiles_inward():
    ranges = torch.tensor([[10, 20, 100, 120]], dtype=torch.int32)
    assert ir.tile_intervals(ranges, torch.tensor(1), 16).tolist() == [[0, 2, 6, 8]]
    assert ir.tile_intervals(ranges, torch.tensor(1), 64).tolist() == [[0, 1, 1, 2]]
    assert ir.tile_intervals(ranges, torch.tensor(0), 16).tolist() == [[0, 0, 0, 0]]


# ---------------------------------------------------------------------------------------------
# cover


@settings(max_examples=40)
@given(
    data=st.data(),
    H=st.integers(1, 3),
    T=st.integers(1, 200),
    causal=st.booleans(),
    block_q=st.sampled_from([16, 32, 64]),
    block_k=st.sampled_from([16, 32, 64]),
    block_n=st.sampled_from([16, 32, 48, 64]),
)
def test_every_kept_element_lies_in_a_visited_tile(data, H, T, causal, block_q, block_k, block_n):
    spec = data.draw(specs(heads=H))
    dec = data.draw(decisions(spec, (1, H, T, 8)))
    program = ir.lower(spec, causal=causal, block_q=block_q, block_k=block_k)
    for g in ir.prepare(program, dec, batch=1, heads=H, seqlen=T, device="cpu").groups:
        stats = ir.tile_stats(g, block_n)
        assert stats["missed"] == 0 and stats["visited"] >= stats["ideal"]
        ideal_back = ir.ideal_tiles(g, block_n, by_keys=True)
        visited_back, unmasked_back = ir.visited_tiles(g.k_ranges, g.k_nseg, block_n, ideal_back.shape[-1])
        assert not bool((ideal_back & ~visited_back).any())
        assert not bool((unmasked_back & (ir.tile_map(g, block_n, by_keys=True) != FULL)).any())


# ---------------------------------------------------------------------------------------------
# tight


def _extrema(pos, bucket, valid, width, buckets, how):
    """(B, Hg, n_blocks, buckets) max (``how="amax"``) or min position of the valid rows of each
    ``width``-row block per bucket; -1 (max) or a large value (min) where there are none."""
    B, Hg, T = pos.shape
    nb = -(-T // width)
    fill = -1 if how == "amax" else 1 << 40
    idx = torch.arange(T) // width * buckets + bucket.clamp_min(0).long()
    src = torch.where(valid, pos.long(), fill)
    out = torch.full((B, Hg, nb * buckets), fill, dtype=torch.int64)
    return out.scatter_reduce_(-1, idx.expand(B, Hg, T), src, how).view(B, Hg, nb, buckets)


def ideal_tiles_fast(g, block_n, *, by_keys=False):
    """``ir.ideal_tiles`` for groups with Causal, SameBucket and Keep predicates: a tile holds a
    kept element iff for some bucket its earliest key is at or before (strictly before, when
    strict) its latest query; without causality, iff both sides have a row of the bucket."""
    assert not g.group.has(ir.NotSelf)
    qmax = _extrema(g.q_pos, g.q_bucket, g.q_pos >= 0, block_n if by_keys else g.block_q, g.group.buckets, "amax")
    kmin = _extrema(
        g.k_pos, g.k_bucket, g.k_pos != ir.KEY_SENTINEL, g.block_k if by_keys else block_n, g.group.buckets, "amin"
    )
    qmax, kmin = qmax.unsqueeze(3), kmin.unsqueeze(2)  # (B, Hg, nq, 1, C), (B, Hg, 1, nk, C)
    causal = g.group.causal
    if causal is None:
        pair = (qmax >= 0) & (kmin < 1 << 40)
    else:
        pair = kmin < qmax if causal.strict else kmin <= qmax
    nonempty = pair.any(-1)  # (B, Hg, nq, nk)
    return nonempty.transpose(-1, -2) if by_keys else nonempty


@settings(max_examples=40)
@given(
    data=st.data(),
    T=st.integers(1, 300),
    causal=st.booleans(),
    block_q=st.sampled_from([16, 32, 64]),
    block_k=st.sampled_from([16, 32, 64]),
    block_n=st.sampled_from([16, 32, 64]),
)
def test_the_fast_ideal_count_equals_ideal_tiles(data, T, causal, block_q, block_k, block_n):
    spec = data.draw(specs(heads=2, attend_self=st.booleans() if causal else True))
    dec = data.draw(decisions(spec, (1, 2, T, 8)))
    program = ir.lower(spec, causal=causal, block_q=block_q, block_k=block_k)
    for g in ir.prepare(program, dec, batch=1, heads=2, seqlen=T, device="cpu").groups:
        for by_keys in (False, True):
            assert torch.equal(
                ideal_tiles_fast(g, block_n, by_keys=by_keys), ir.ideal_tiles(g, block_n, by_keys=by_keys)
            )


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "non-causal"])
@pytest.mark.parametrize("spec", [ts.Hash(buckets=16), ts.QKDrop(keep=0.5)], ids=str)
@pytest.mark.parametrize("seed", [0, 1])
def test_visited_tiles_are_within_5_percent_of_ideal_at_16k(spec, causal, seed):
    T, block = 16_384, 128
    x = torch.randn(1, 2, T, 8, generator=torch.Generator().manual_seed(seed))
    dec = spec.decide(x, x, generator=torch.Generator().manual_seed(seed))
    program = ir.lower(spec, causal=causal, block_q=block, block_k=block)
    (g,) = ir.prepare(program, dec, batch=1, heads=2, seqlen=T, device="cpu").groups
    n = -(-T // block)
    for by_keys, (ranges, nseg) in ((False, (g.q_ranges, g.q_nseg)), (True, (g.k_ranges, g.k_nseg))):
        ideal = ideal_tiles_fast(g, block, by_keys=by_keys)
        visited, _ = ir.visited_tiles(ranges, nseg, block, n)
        what = "backward" if by_keys else "forward"
        assert not bool((ideal & ~visited).any()), f"{what}: a tile holding kept elements is skipped"
        n_visited, n_ideal = int(visited.sum()), int(ideal.sum())
        assert n_visited <= 1.05 * n_ideal, f"{what}: visited {n_visited} tiles, ideal {n_ideal}"


def test_loose_ranges_fail_the_tightness_bound():
    spec, T, block = ts.Hash(buckets=16), 4096, 128
    x = torch.randn(1, 1, T, 8, generator=torch.Generator().manual_seed(0))
    (g,) = ir.prepare(
        ir.lower(spec, causal=True, block_q=block, block_k=block),
        spec.decide(x, x),
        batch=1,
        heads=1,
        seqlen=T,
        device="cpu",
    ).groups
    loose = g.q_ranges.clone()
    loose[..., 0] = 0  # every segment from row 0: a whole-prefix range, still covering
    visited, _ = ir.visited_tiles(loose, g.q_nseg, block, T // block)
    assert int(visited.sum()) > 1.05 * int(ideal_tiles_fast(g, block).sum())


# ---------------------------------------------------------------------------------------------
# inspection


def test_inspection_of_dense_causal_attention():
    program = ir.lower(ts.Dense(), causal=True, block_q=64, block_k=64)
    prepared = ir.prepare(program, ts.Decisions(), batch=1, heads=1, seqlen=256, device="cpu")
    (g,) = prepared.groups
    m, n = torch.arange(4).view(4, 1), torch.arange(4).view(1, 4)
    want = torch.where(n < m, FULL, torch.where(n == m, PARTIAL, EMPTY)).to(torch.int8)
    assert torch.equal(ir.tile_map(g)[0, 0], want)
    assert ir.tile_stats(g) == {
        "visited": 10, "unmasked": 6, "dense_tiles": 10, "visited_fraction": 1.0,
        "ideal": 10, "ideal_fraction": 1.0, "missed": 0,
    }  # fmt: skip
    assert ir.sparsity(prepared) == 0.0
    assert ir.to_string(g) == "head 0 (identity), 64x64 tiles, layout order:\n+...\n#+..\n##+.\n###+"
    assert torch.equal(ir.to_dense(prepared)[0, 0], torch.ones(256, 256, dtype=torch.bool).tril())
    # T = 200: the last block has padding rows, so its tiles all run with the mask
    (g,) = ir.prepare(program, ts.Decisions(), batch=1, heads=1, seqlen=200, device="cpu").groups
    assert torch.equal(ir.tile_map(g)[0, 0], want)
    assert ir.to_string(g).splitlines()[1:] == ["+...", "#+..", "##+.", "++++"]


def test_to_string_marks_skipped_kept_tiles():
    program = ir.lower(ts.Dense(), causal=True, block_q=64, block_k=64)
    (g,) = ir.prepare(program, ts.Decisions(), batch=1, heads=1, seqlen=128, device="cpu").groups
    broken = g.q_ranges.clone()
    broken[0, 0, 1] = 0  # block 1 visits nothing
    text = ir.to_string(dataclasses.replace(g, q_ranges=broken))
    assert text.splitlines()[1:] == ["+.", "!!"]


def test_sparsity_of_hashing_grows_with_buckets():
    T = 1024
    x = torch.randn(1, 1, T, 16, generator=torch.Generator().manual_seed(0))
    fractions = []
    for buckets in (1, 4, 16):
        spec = ts.Hash(buckets=buckets)
        prepared = ir.prepare(
            ir.lower(spec, causal=True, block_q=64, block_k=64),
            spec.decide(x, x),
            batch=1,
            heads=1,
            seqlen=T,
            device="cpu",
        )
        fractions.append(ir.sparsity(prepared, 64))
    assert fractions[0] == 0.0 and fractions[0] < fractions[1] < fractions[2]
