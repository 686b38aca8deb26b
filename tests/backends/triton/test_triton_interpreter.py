"""The Triton kernels on the CPU, under TRITON_INTERPRET=1, against the masked dense reference.

Outputs and all three gradients, for every layout (identity, compact, sort, compact-sort) x
predicate set (causal >=, causal > via attend_self=False, non-causal, non-causal not-self) in
fp32, and fp16 and bf16 on every layout (the backend patches the interpreter's bf16 dot), with
the predicates rotated between them (hypothesis over random specs, decisions, shapes and GQA is
test_triton_random_patterns.py, a file of its own so that the other test worker runs it beside
this one). Tiles are 32 wide on the CPU (TileConfig for device cpu), so T up to a few hundred
crosses many blocks. What the interpreter cannot show (races, shared memory, spills) is covered
by test_compile_sm90.py and tests/gpu.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.op import TileConfig, launch_key, override_config, tile_config
from tilesparse.ir import lower, prepare_group
from tilesparse.testing import assert_equivalent

LAYOUTS = {
    "identity": ts.Dense(),
    "compact": ts.QKDrop(keep=0.5),
    "sort": ts.Hash(buckets=4),
    "compact_sort": ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop(keep=0.6)]),
}
PREDICATES = {"causal": (True, True), "strict": (True, False), "noncausal": (False, True), "not_self": (False, False)}


def _without_self(spec):
    """The spec with attend_self=False on its Hash part (only sorted layouts have one)."""
    if isinstance(spec, ts.Hash):
        return spec.model_copy(update={"attend_self": False})
    parts = tuple(p.model_copy(update={"attend_self": False}) if isinstance(p, ts.Hash) else p for p in spec.parts)
    return ts.Hybrid(parts=parts)


# attend_self lives on Hash, so the not-self predicates exist for the sorted layouts only
CASES = [(lay, pred) for lay in LAYOUTS for pred in PREDICATES if "sort" in lay or PREDICATES[pred][1]]


# every (layout, predicate) in fp32; each 16-bit dtype on every layout, the predicates rotated
# so that each dtype meets a different one per layout (the dtype changes loads, dots and
# stores, not the mask)
_16BIT = [
    (lay, [p for p in PREDICATES if (lay, p) in CASES][(i + j) % len([p for p in PREDICATES if (lay, p) in CASES])], dt)
    for i, lay in enumerate(LAYOUTS) for j, dt in enumerate((torch.float16, torch.bfloat16))
]  # fmt: skip
DTYPE_CASES = [(lay, pred, torch.float32) for lay, pred in CASES] + _16BIT


@pytest.mark.parametrize(("layout", "pred", "dtype"), DTYPE_CASES, ids=lambda x: str(x).removeprefix("torch."))
def test_every_layout_predicate_dtype(layout, pred, dtype):
    causal, attend_self = PREDICATES[pred]
    spec = LAYOUTS[layout] if attend_self else _without_self(LAYOUTS[layout])
    attn = ts.compile(spec, causal=causal, backend="triton")
    g = torch.Generator().manual_seed(hash((layout, pred)) % 2**31)
    q, k, v = (torch.randn((1, 2, 77, 24), generator=g).to(dtype) for _ in range(3))
    assert attn.plan(q, k, v).assignments[0].group.layout.value == layout
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k, generator=g))


@pytest.mark.parametrize("blocks", [(32, 32, 16, 16, 16), (64, 32, 32, 16, 32), (16, 64, 16, 32, 16)])
def test_tile_widths_differ_from_blocks(blocks):
    """Ranges are in rows: any tile width on the other side visits the right tiles."""
    q, k, v = (torch.randn((1, 2, 150, 16), generator=torch.Generator().manual_seed(3)) for _ in range(3))
    fields = dict(zip(("block_q", "block_k", "fwd_n", "dq_n", "dkdv_m"), blocks, strict=True))
    with override_config(**fields):
        for spec in (ts.Hash(buckets=5), ts.Hybrid(parts=[ts.Hash(buckets=2), ts.QKDrop(keep=0.5)])):
            attn = ts.compile(spec, backend="triton")
            assert_equivalent(attn, q, k, v)


@pytest.mark.parametrize("single_loop", [1, 2])
def test_one_masked_loop_per_segment(single_loop):
    """SINGLE_LOOP runs every tile of a segment masked, in one loop: the same result, with
    GQA and both a bucket and a drop predicate."""
    g = torch.Generator().manual_seed(5)
    q = torch.randn((1, 4, 130, 16), generator=g)
    k, v = (torch.randn((1, 2, 130, 16), generator=g) for _ in range(2))
    with override_config(single_loop=single_loop):
        for spec in (ts.Hash(buckets=3), ts.QKDrop(keep=0.6)):
            assert_equivalent(ts.compile(spec, backend="triton"), q, k, v)


def _launch_constants(monkeypatch, kernel: str, name: str) -> list:
    """A list that collects compile-time constant ``name`` of every launch of ``kernel`` (a
    kernels.py name) but its sanitizing variant's, from here to the test's end."""
    from tilesparse.backends.triton import kernels
    from tilesparse.backends.triton.launch import LeanKernel

    fn = getattr(kernels, kernel)
    seen: list = []
    normal = LeanKernel._normal

    def record(self, grid, args, constants):
        if self.fn is fn and not constants.get("SANITIZE", False):
            seen.append(constants[name])
        return normal(self, grid, args, constants)

    monkeypatch.setattr(LeanKernel, "_normal", record)
    return seen


def test_bucket_groups_take_their_own_forward_tile(monkeypatch):
    """``bucket_fwd_n`` sets the forward's key tile width in groups with a bucket predicate and
    only there (ranges are in rows, so any width is exact): the launches show each width, and
    the results match the reference, GQA included."""
    widths = _launch_constants(monkeypatch, "_attn_fwd", "BLOCK_N")
    g = torch.Generator().manual_seed(6)
    q = torch.randn((1, 4, 110, 16), generator=g)
    k, v = (torch.randn((1, 2, 110, 16), generator=g) for _ in range(2))
    with override_config(fwd_n=32, bucket_fwd_n=16):
        for spec, width in ((ts.Hash(buckets=3), 16), (ts.QKDrop(keep=0.6), 32)):
            widths.clear()
            assert_equivalent(ts.compile(spec, backend="triton"), q, k, v)
            assert widths and set(widths) == {width}, (spec, widths)


@pytest.mark.parametrize("dp_first, single, hash_on", [(1, 1, False), (2, 1, True), (1, 0, True)])
def test_dp_first_reorders_dkdv_and_keeps_the_result(monkeypatch, dp_first, single, hash_on):
    """``dp_first`` issues the dK/dV kernel's dP product before the exponentials: 1 where a
    group's segments run three loops (a drop group; a bucket group only without ``single_loop``),
    2 in every group. The launches show where it is on, and the results (GQA, bucket and drop
    predicates) match the reference."""
    seen = _launch_constants(monkeypatch, "_attn_bwd_dkdv", "DP_FIRST")
    g = torch.Generator().manual_seed(7)
    q = torch.randn((1, 4, 120, 16), generator=g)
    k, v = (torch.randn((1, 2, 120, 16), generator=g) for _ in range(2))
    with override_config(dp_first=dp_first, single_loop=single):
        for spec, on in ((ts.Hash(buckets=3), hash_on), (ts.QKDrop(keep=0.6), True)):
            seen.clear()
            assert_equivalent(ts.compile(spec, backend="triton"), q, k, v)
            assert seen and set(seen) == {on}, (spec, seen)


@pytest.mark.parametrize("rows, long", [(60, True), (70, False)])
def test_long_bucket_segments_run_three_loops(monkeypatch, rows, long):
    """``long_segment_rows``: a bucket group whose mean segment (130 rows / 2 buckets = 65) holds
    at least that many rows runs three loops, with dP first (``dp_first=1``), and one masked
    loop otherwise; a drop group runs three loops either way. The launches show it, and the
    results match the reference."""
    loops = _launch_constants(monkeypatch, "_attn_bwd_dq", "SINGLE_LOOP")
    order = _launch_constants(monkeypatch, "_attn_bwd_dkdv", "DP_FIRST")
    g = torch.Generator().manual_seed(8)
    q = torch.randn((1, 4, 130, 16), generator=g)
    k, v = (torch.randn((1, 2, 130, 16), generator=g) for _ in range(2))
    with override_config(single_loop=1, dp_first=1, long_segment_rows=rows):
        for spec, three in ((ts.Hash(buckets=2), long), (ts.QKDrop(keep=0.6), True)):
            loops.clear()
            order.clear()
            assert_equivalent(ts.compile(spec, backend="triton"), q, k, v)
            assert set(loops) == {not three} and set(order) == {three}, (spec, loops, order)


def test_the_configurations_run_three_loops_from_the_measured_segment_lengths():
    """16-bit D=128 bucket groups run three loops from 1,024-row segments (runs 118-119: Hash(16)
    at 16k 3-5% faster; 512 rows even, run 120), D=64 and 96 from 2,048 (D=64 at 1,024 rows 1-2%
    slower, run 118), D <= 32 and D=256 one masked loop at any length; fp32 runs three loops
    everywhere. Hash(16) at 16,384 tokens is the D=128 edge."""
    cuda = torch.device("cuda")
    for D, rows in ((16, 0), (32, 0), (64, 2048), (96, 2048), (128, 1024), (256, 0)):
        for dtype in (torch.float16, torch.bfloat16):
            assert tile_config(D, dtype, cuda).long_segment_rows == rows, (D, dtype)
        assert tile_config(D, torch.float32, cuda).single_loop == 0, D  # fp32: three loops everywhere
    cfg = tile_config(128, torch.bfloat16, cuda)
    assert 0 < cfg.long_segment_rows <= 16384 / 16 and not cfg.long_segment_rows <= 16384 / 32


def test_noncontiguous_inputs():
    base = torch.randn((2, 100, 4, 32))  # (B, T, H, D): the layout many models keep
    q = base.transpose(1, 2)
    k = torch.randn((2, 100, 2, 32)).transpose(1, 2)
    v = torch.randn((2, 100, 2, 32)).transpose(1, 2)
    assert not q.is_contiguous()
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.8)]), backend="triton")
    assert_equivalent(attn, q, k, v)


def test_dropped_queries_and_empty_rows_are_zero_with_zero_grads():
    T = 70
    q, k, v = (torch.randn((1, 2, T, 16), requires_grad=True) for _ in range(3))
    keep_q = torch.ones((1, 2, T), dtype=torch.bool)
    keep_q[0, 0] = False  # every query of head 0 dropped
    keep_k = torch.ones((1, 2, T), dtype=torch.bool)
    keep_k[0, 1, :40] = False  # head 1: queries before position 40 have no key
    attn = ts.compile(ts.QKDrop(keep=0.5), backend="triton")
    out = attn(q, k, v, decisions=ts.Decisions(q_keep=keep_q, k_keep=keep_k))
    out.sum().backward()
    assert torch.equal(out[0, 0], torch.zeros_like(out[0, 0]))
    assert torch.equal(out[0, 1, :40], torch.zeros_like(out[0, 1, :40]))
    assert torch.equal(q.grad[0, 0], torch.zeros_like(q.grad[0, 0]))
    assert torch.equal(q.grad[0, 1, :40], torch.zeros_like(q.grad[0, 1, :40]))
    assert torch.equal(k.grad[0, 1, :40], torch.zeros_like(k.grad[0, 1, :40]))
    assert not out.isnan().any() and not q.grad.isnan().any()


def test_launch_key_is_flat_over_fresh_decisions():
    """Decisions and compacted lengths are data, never compile-time constants: the key a
    launch specializes on stays the same over 50 steps of fresh decisions (the GPU test
    counts real compilations)."""
    q = torch.randn((2, 3, 200, 32))
    spec = ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.5)])
    attn = ts.compile(spec, backend="triton")
    cfg = tile_config(32, q.dtype, q.device)
    program = lower(spec, causal=True, block_q=cfg.block_q, block_k=cfg.block_k)
    keys = set()
    for step in range(50):
        dec = attn.decide(q, q, generator=torch.Generator().manual_seed(step))
        g = prepare_group(program, program.groups[0], (0, 1, 2), dec, batch=2, heads=3, seqlen=200, device="cpu")
        keys.add(launch_key(g, q, cfg))
    assert len(keys) == 1, keys


def test_config_override_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown TileConfig fields"), override_config(block_x=3):
        pass
    assert isinstance(tile_config(64, torch.float16, torch.device("cpu")), TileConfig)


def test_the_bf16_dot_patch_is_tied_to_the_versions_that_need_it():
    """The installed Triton's own interpreter dot gets bf16 wrong exactly when the backend says
    the patch is needed; a release that fixes it fails here until it is recorded as fixed."""
    import triton
    import triton.language as tl
    from triton.runtime import interpreter as tri_interpreter

    from tilesparse.backends.triton import interpreter

    assert interpreter.needs_bf16_dot_patch("3.6.0") and interpreter.needs_bf16_dot_patch("3.7.1")

    @triton.jit
    def dot16(a_ptr, b_ptr, c_ptr):
        offs = tl.arange(0, 16)
        a = tl.load(a_ptr + offs[:, None] * 16 + offs[None, :])
        b = tl.load(b_ptr + offs[:, None] * 16 + offs[None, :])
        tl.store(c_ptr + offs[:, None] * 16 + offs[None, :], tl.dot(a, b))

    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn((16, 16), generator=g).to(torch.bfloat16) for _ in range(2))
    want = a.float() @ b.float()
    builder = tri_interpreter.InterpreterBuilder
    patched = builder.create_dot
    builder.create_dot = interpreter.unpatched_create_dot()
    try:
        c = torch.empty((16, 16), dtype=torch.float32)
        dot16[(1,)](a, b, c)
    finally:
        builder.create_dot = patched
    broken = not torch.allclose(c, want, atol=1e-2, rtol=1e-2)
    assert broken == interpreter.needs_bf16_dot_patch(), (triton.__version__, (c - want).abs().max())
    interpreter.patch_bf16_dot()
    assert (builder.create_dot is not interpreter.unpatched_create_dot()) == broken, "patched exactly where broken"
    dot16[(1,)](a, b, c)
    torch.testing.assert_close(c, want, atol=1e-3, rtol=1e-3)
