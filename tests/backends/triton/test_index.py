"""The fused index-building kernels (index.py) against the IR's torch ``prepare_group``: the
same layout tensors, segments and ranges, bit for bit, on random specs and decisions
(interpreter on the CPU here; tests/gpu repeats it on the H200)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.triton.index import bind_group, build_group, separate_sort
from tilesparse.execute import with_dense_heads
from tilesparse.ir import AttentionInputs, lower
from tilesparse.testing import decisions, specs
from tilesparse.testing import index as testing_index


def assert_same_index_tensors(spec, dec, shape, causal, blocks):
    testing_index.assert_same_index_tensors(build_group, spec, dec, shape, causal=causal, blocks=blocks)


@settings(max_examples=12)
@given(
    data=st.data(),
    T=st.integers(1, 80),
    causal=st.booleans(),
    blocks=st.sampled_from([(16, 16), (32, 16), (16, 32)]),
)
def test_fused_index_building_matches_torch(data, T, causal, blocks):
    shape = (data.draw(st.integers(1, 2)), 2, T, 16)
    spec = data.draw(specs(heads=2, kinds=("dense", "qk_drop", "hash", "hybrid"), max_buckets=20))
    dec = data.draw(decisions(spec, shape))
    assert_same_index_tensors(spec, dec, shape, causal, blocks)


@settings(max_examples=10)
@given(data=st.data(), T=st.integers(1, 120), causal=st.booleans())
def test_counting_sort_across_many_chunks(data, T, causal, monkeypatch_chunks):
    """Tiny chunks (16-32 rows) and scan steps: the counting sort's carries between chunks and
    between scan steps are exercised at interpreter sizes (the scan launch always)."""
    shape = (data.draw(st.integers(1, 2)), 2, T, 16)
    spec = data.draw(specs(heads=2, kinds=("qk_drop", "hash", "hybrid"), max_buckets=40))
    dec = data.draw(decisions(spec, shape))
    with _limits(_FUSED_SCAN=0), separate_sort():
        assert_same_index_tensors(spec, dec, shape, causal, (16, 16))


@settings(max_examples=5)
@given(data=st.data(), T=st.integers(33, 120), causal=st.booleans())
def test_fused_scan_across_many_chunks(data, T, causal, monkeypatch_chunks):
    """The scatter that sums the chunks' counts itself (no scan launch) gives the same tensors
    over many tiny chunks."""
    shape = (1, 2, T, 16)
    spec = data.draw(specs(heads=2, kinds=("qk_drop", "hash", "hybrid"), max_buckets=40))
    dec = data.draw(decisions(spec, shape))
    with _limits(_FUSED_SCAN=1 << 20), separate_sort():
        assert_same_index_tensors(spec, dec, shape, causal, (16, 16))


@settings(max_examples=6)
@given(data=st.data(), T=st.integers(17, 120), causal=st.booleans())
def test_fused_sort_across_many_chunks(data, T, causal, monkeypatch_chunks):
    """The keys and the scatter in one launch (each program counting its side's rows itself, 16
    rows at a time) give the same tensors over many tiny chunks."""
    shape = (data.draw(st.integers(1, 2)), 2, T, 16)
    spec = data.draw(specs(heads=2, kinds=("qk_drop", "hash", "hybrid"), max_buckets=40))
    dec = data.draw(decisions(spec, shape))
    with _limits(_FUSED_SORT_ROWS=1 << 20):
        assert_same_index_tensors(spec, dec, shape, causal, (16, 16))


@contextlib.contextmanager
def _limits(**values: int):
    """index.py's launch limits set to ``values`` inside the block."""
    from tilesparse.backends.triton import index

    old = {name: getattr(index, name) for name in values}
    for name, value in values.items():
        setattr(index, name, value)
    index._static.cache_clear()
    try:
        yield
    finally:
        for name, value in old.items():
            setattr(index, name, value)
        index._static.cache_clear()


@pytest.fixture(scope="module")
def monkeypatch_chunks():
    from tilesparse.backends.triton import index

    old = index._ONE_HOT_ROWS, index._SORT_ROWS, index._SCAN_TILE, index._COUNT_ROWS
    index._ONE_HOT_ROWS, index._SORT_ROWS, index._SCAN_TILE, index._COUNT_ROWS = 32, 16, 16, 16
    index._static.cache_clear()
    yield
    index._ONE_HOT_ROWS, index._SORT_ROWS, index._SCAN_TILE, index._COUNT_ROWS = old
    index._static.cache_clear()


@settings(max_examples=8)
@given(data=st.data(), T=st.integers(1, 80), causal=st.booleans(), fused_sort=st.booleans())
def test_dense_heads_built_by_the_sort_launch(data, T, causal, fused_sort, monkeypatch_chunks):
    """A PerHead's dense heads fused into a group (``bind_group(..., dense_heads=...)``: a flag the
    sort's launch reads) give the tensors of the same build on decisions filled so (every token
    kept, bucket 0: ``execute.with_dense_heads``), with the keys and scatter in one launch or
    apart; and a head not among the group's is refused by name."""
    B, H = data.draw(st.integers(1, 2)), 3
    shape = (B, H, T, 16)
    keep, buckets = data.draw(st.floats(0.1, 0.9)), data.draw(st.integers(1, 40))
    hash_, drop = ts.Hash(buckets=buckets), ts.QKDrop(keep=keep)
    spec = data.draw(st.sampled_from([drop, hash_, ts.Hybrid(parts=[hash_, drop])]))  # keep, bucket, both
    dec = data.draw(decisions(spec, shape))
    dense = tuple(sorted(data.draw(st.sets(st.integers(0, H - 1), min_size=1, max_size=H))))
    x = torch.zeros(()).expand(shape)
    inputs = AttentionInputs(x, x, x, scale=1.0)
    program = lower(spec, causal=causal, block_q=16, block_k=16)
    (group,) = program.groups
    heads = tuple(range(H))
    with contextlib.ExitStack() as stack:
        if not fused_sort:
            stack.enter_context(separate_sort())
        want = bind_group(program, group, heads, inputs)(with_dense_heads(dec, dense), inputs)
        got = bind_group(program, group, heads, inputs, dense)(dec, inputs)
        for name in testing_index.INDEX_FIELDS:
            assert torch.equal(getattr(want, name), getattr(got, name)), name
    with pytest.raises(ValueError, match=r"dense_heads \[3\] are not among the group's heads \[0, 1\]"):
        bind_group(program, group, (0, 1), inputs, (3,))
