"""The fused index-building kernels (index.py) against the IR's torch ``prepare_group``: the
same layout tensors, segments and ranges, bit for bit, on random specs and decisions
(interpreter on the CPU here; tests/gpu repeats it on the H200)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesparse.backends.triton.index import build_group
from tilesparse.ir import lower, prepare_group, resolve_heads
from tilesparse.testing import decisions, specs

FIELDS = ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges", "k_nseg")


def assert_same_index_tensors(spec, dec, shape, causal, blocks, device="cpu"):
    B, H, T, _ = shape
    program = lower(spec, causal=causal, block_q=blocks[0], block_k=blocks[1])
    for group, heads in zip(program.groups, resolve_heads(program, H), strict=True):
        if not heads:
            continue
        want = prepare_group(program, group, heads, dec, batch=B, heads=H, seqlen=T, device=device)
        got = build_group(program, group, heads, dec, batch=B, n_heads=H, seqlen=T, device=torch.device(device))
        for name in FIELDS:
            a, b = getattr(want, name), getattr(got, name)
            assert a.shape == b.shape and a.dtype == b.dtype, f"{name}: {b.dtype} {tuple(b.shape)} != {a.dtype} {tuple(a.shape)}"
            if not torch.equal(a, b):
                where = (a != b).nonzero()[0].tolist()
                raise AssertionError(f"{group.describe()}: {name} differs first at {where}")


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
