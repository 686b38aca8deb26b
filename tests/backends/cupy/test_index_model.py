"""The model of the two index-building kernels (``backends/cupy/index_model.py``:
``index_count``'s chunk histograms, then ``index_scatter``'s stable counting sort with warp
ranks and the block ranges from the two sides' bin offsets, causal bounds from the other side's
histograms of earlier chunks plus a count over the rest, lane by lane as in ``kernels/index.cu``)
gives exactly :func:`tilesparse.ir.prepare_group`'s tensors, over every layout (identity,
compact, sort, compact-sort), causal or not, strict or not, edge-case decisions, block sizes
16..128, and programs small enough that T <= 300 spans several chunks and warps: 64 threads
over 96-token chunks, 64 threads over 40-token chunks (chunks neither a multiple of the
program's threads nor of a warp, passes running past the chunk) and one warp over 32 tokens.

Property tests; CPU only.
"""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesparse import ir
from tilesparse.backends.cupy.index_model import build_group_model
from tilesparse.testing import decisions, specs

FIELDS = ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges", "k_nseg",
          "q_support", "k_support")  # fmt: skip


@settings(max_examples=40)
@given(
    data=st.data(),
    causal=st.booleans(),
    block_q=st.sampled_from([16, 32, 64, 128]),
    block_k=st.sampled_from([16, 64]),
    T=st.integers(1, 300),
    program_size=st.sampled_from([(96, 64), (40, 64), (32, 32)]),
)
def test_the_index_kernels_model_equals_prepare(data, causal, block_q, block_k, T, program_size):
    spec = data.draw(specs(allow_per_head=False, max_k=4))
    B, H = 1, 2
    dec = data.draw(decisions(spec, (B, H, T, 8)))
    program = ir.lower(spec, causal=causal, block_q=block_q, block_k=block_k)
    group = program.groups[0]
    kw = {"batch": B, "seqlen": T, "device": "cpu"}
    want = ir.prepare_group(program, group, (0, 1), dec, heads=H, **kw)
    chunk_size, nt = program_size
    got = build_group_model(program, group, (0, 1), dec, n_heads=H, chunk_size=chunk_size, nt=nt, **kw)
    for f in FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        if b is None:
            assert a is None, f
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), f"{f} differs: {spec} causal={causal} {program_size}"
