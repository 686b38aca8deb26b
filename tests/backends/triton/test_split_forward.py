"""The Triton forward and dQ kernels with their query blocks split over windows of their key
tiles, and the dK/dV kernel with its key blocks split over windows of their query tiles
(``TileConfig.fwd_split``, ``dq_split``, ``dkdv_split``; kernels._share_window, _merged_shares,
_summed_shares): outputs and gradients those of the unsplit kernels (to
rounding: the shares' merge and sums add in another order) and of the reference, for every
built-in pattern, GQA, Tq < Tk, lengths no multiple of a block, rows with no key, one token;
non-finite inputs and a poison handled as the unsplit kernels handle them; the workspace's
counters zero after every launch; by default only groups that fuse dense heads split. Under the
interpreter, 32-wide CPU tiles."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.triton import op
from tilesparse.backends.triton.nonfinite import sanitize_in_pairs
from tilesparse.backends.triton.op import Launches, override_config, tile_config

from builtin_specs import counters_after_flags, counters_left, given_decisions, one_of_each_kind, recorded_workspaces

SPECS = one_of_each_kind(keep=0.6, buckets=3, k=4)


def split(shares: int = 4):
    """Split the forward's and dQ's query blocks and dK/dV's key blocks into ``shares`` windows
    on every call."""
    return override_config(fwd_split=shares, dq_split=shares, dkdv_split=shares, split_programs=10**9, split_all=1)


def _grads(attn, q, k, v, dec, go):
    out = attn(q, k, v, decisions=dec)
    return (out, *torch.autograd.grad(out, (q, k, v), go))


def _close(got: torch.Tensor, want: torch.Tensor, atol: float = 2e-5) -> bool:
    """The same non-finite entries (the same kind of each) and finite ones within ``atol``."""
    same_nan = torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
    fin = torch.isfinite(want)
    return same_nan and torch.equal(got[~fin & ~want.isnan()], want[~fin & ~want.isnan()]) and bool(
        torch.allclose(got[fin], want[fin], atol=atol, rtol=atol)
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_split_forward_gives_the_unsplit_results(name, causal):
    """GQA (4 query heads, 2 kv heads), Tq = 150 < Tk = 200: 7 key tiles, windows of 2; 5 query
    tiles, windows of 2 (dK/dV)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn((1, 4, 150, 16), generator=g, requires_grad=True)
    k, v = (torch.randn((1, 2, 200, 16), generator=g, requires_grad=True) for _ in range(2))
    go = torch.randn((1, 4, 150, 16), generator=g)
    attn = ts.compile(SPECS[name], causal=causal, backend="triton")
    dec = given_decisions(attn, q, k)
    want = _grads(attn, q, k, v, dec, go)
    with split():
        got = _grads(attn, q, k, v, dec, go)
    for a, b, what in zip(got, want, ("out", "dq", "dk", "dv"), strict=True):
        torch.testing.assert_close(a, b, atol=2e-6, rtol=2e-6, msg=f"{name} {what}")
    torch.testing.assert_close(got[0], attn.reference(q, k, v, decisions=dec), atol=2e-5, rtol=2e-5)


def test_blocks_of_several_shares_are_merged_and_their_counters_left_at_zero():
    """A dense causal call of 200 tokens: the last query blocks span 4 windows of 2 tiles; their
    shares' slots hold what they stored, every counter is back at zero after the launch (they
    follow the call's flags, which the build zeroed), and a second call gives the same output
    bit for bit."""
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn((1, 2, 200, 16), generator=g) for _ in range(3))
    attn = ts.compile(ts.Dense(), causal=True, backend="triton")
    with split(), recorded_workspaces() as made:
        first = attn(q, k, v)
        (work,), (counters,) = made.works, made.counters
        assert counters.numel() == 2 * 7  # (batch x heads) x blocks of 32 of the larger side
        assert not counters_left(made), "a counter was left set"
        assert work.isfinite().any(), "no share stored a slot: nothing was split"
        again = attn(q, k, v)
    assert torch.equal(first, again)
    torch.testing.assert_close(first, attn.reference(q, k, v), atol=2e-5, rtol=2e-5)


def test_the_launch_splits_only_short_calls_and_only_the_triton_kernel():
    q = torch.randn(1, 4, 200, 16)
    k = v = torch.randn(1, 2, 200, 16)
    attn = ts.compile(ts.Dense(), causal=True, backend="triton")
    (g,) = attn.prepare(q, k, v).groups
    n_qb = g.q_ranges.shape[2]
    n_kb = g.k_ranges.shape[2]
    with override_config(fwd_split=3, dq_split=2, dkdv_split=5, split_programs=4 * n_qb, split_all=1):
        cfg = tile_config(16, q.dtype, q.device)
        launches = Launches(q, k, v, g, 0.25, cfg)
        fwd, (dq, dkdv) = launches.fwd, launches.backward
        assert fwd.grid == (3 * n_qb, 4) and fwd.constants["SPLIT"] == 3
        assert dq.grid == (2 * n_qb, 4) and dq.constants["SPLIT"] == 2
        assert dkdv.grid == (5 * n_kb, 4) and dkdv.constants["SPLIT"] == 5
        blocks, k_blocks = 4 * n_qb, 4 * n_kb
        assert fwd.work == blocks * 3 * cfg.block_q * (16 + 2)
        assert dq.work == blocks * 2 * cfg.block_q * (16 + 2)
        assert dkdv.work == k_blocks * 5 * 2 * cfg.block_k * 16
        assert launches.counters == max(blocks, k_blocks)
        for unsplit, n in zip(launches.unsplit, (n_qb, n_qb, n_kb), strict=True):  # unsplit_blocks()'s
            assert unsplit.grid == (n, 4) and "SPLIT" not in unsplit.constants and unsplit.work is None
    with override_config(fwd_split=3, dq_split=2, split_programs=4 * n_qb):
        cfg = tile_config(16, q.dtype, q.device)
        assert Launches(q, k, v, g, 0.25, cfg, mixed=True).fwd.grid == (3 * n_qb, 4)  # dense heads fused in
        for mixed, programs in ((False, 4 * n_qb), (True, 4 * n_qb - 1)):  # without split_all; one block too many
            with override_config(split_programs=programs, dkdv_split=2):
                launches = Launches(q, k, v, g, 0.25, tile_config(16, q.dtype, q.device), mixed=mixed)
            for launch in (launches.fwd, *launches.backward):
                assert launch.grid == (n_qb, 4) and "SPLIT" not in launch.constants and launch.work is None
    cfg = tile_config(16, q.dtype, q.device)
    assert cfg.fwd_split == cfg.dq_split == cfg.dkdv_split == 0  # off unless configured
    on = replace(cfg, split_programs=99)
    assert op._split(4, on, 99, True) == 4 and op._split(4, on, 100, True) == 1
    assert op._split(4, on, 8, False) == 1  # a warp-specialized kernel never splits


def _case(kind: str, T: int, heads: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    if kind == "dense":
        return ts.Dense(), None
    if kind == "hash":
        return ts.Hash(buckets=3), ts.Decisions(q_bucket=torch.randint(0, 3, (1, heads, T), generator=g),
                                                k_bucket=torch.randint(0, 3, (1, heads, T), generator=g))
    keep = 0.05 if kind == "sparse-drop" else 0.6  # rows with no key at all
    return ts.QKDrop(keep=keep), ts.Decisions(q_keep=torch.rand(1, heads, T, generator=g) < 0.7,
                                              k_keep=torch.rand(1, heads, T, generator=g) < keep)


POISONS = [None, ("v", float("inf")), ("v", float("nan")), ("k", float("nan")), ("q", float("nan"))]


def _case_strategies(longest: int) -> dict:
    """The property tests' draws (:func:`_property_case`'s arguments, and shares and causality),
    up to ``longest`` keys."""
    return dict(kind=st.sampled_from(["dense", "hash", "drop", "sparse-drop"]), poison=st.sampled_from(POISONS),
                Tk=st.integers(1, longest), short=st.integers(0, 60), row=st.integers(0, longest - 1),
                group=st.integers(1, 2), shares=st.integers(2, 5), causal=st.booleans(), seed=st.integers(0, 2**16))


def _property_case(kind: str, poison, Tk: int, short: int, row: int, group: int, seed: int):
    """The property tests' case: q (1, 2 x group, Tq = max(1, Tk - short), 16), k and v (1, 2,
    Tk, 16), an output gradient, and ``kind``'s spec and decisions (:func:`_case`, the queries'
    the last Tq), ``poison`` (tensor, value) written into row ``row`` of the last head."""
    Tq = max(1, Tk - short)
    heads = 2 * group
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, Tq, 16, generator=g)
    k, v = (torch.randn(1, 2, Tk, 16, generator=g) for _ in range(2))
    go = torch.randn(1, heads, Tq, 16, generator=g)
    spec, dec = _case(kind, Tk, heads, seed)
    if dec is not None and Tq != Tk:
        dec = ts.Decisions(**{n: (t[..., -Tq:] if n.startswith("q_") else t) for n, t in dec.items() if t is not None})
    if poison is not None:
        tensor, value = poison
        bad = {"q": q, "k": k, "v": v}[tensor]
        bad[0, -1, row % bad.shape[2], 3] = value
    return q, k, v, go, spec, dec


@settings(max_examples=14, derandomize=True, deadline=None, database=None)
@given(paired=st.booleans(), **_case_strategies(160))
def test_split_forward_property(kind, poison, Tk, short, row, group, shares, causal, paired, seed):
    """Against the unsplit forward, NaN for NaN: one token to 160, Tq <= Tk, GQA, a non-finite
    value in q, k or v (sanitized in the forward's own launch or by its pair)."""
    q, k, v, _, spec, dec = _property_case(kind, poison, Tk, short, row, group, seed)
    attn = ts.compile(spec, causal=causal, backend="triton")
    with sanitize_in_pairs() if paired else contextlib.nullcontext():
        want = attn(q, k, v, decisions=dec, return_lse=True)
        with split(shares), recorded_workspaces() as made:
            got = attn(q, k, v, decisions=dec, return_lse=True)
            assert not counters_left(made)
    for a, b, what in zip(got, want, ("out", "lse"), strict=True):
        assert _close(a, b), what


@settings(max_examples=10, derandomize=True, deadline=None, database=None)
@given(**_case_strategies(130))
def test_split_backward_property(kind, poison, Tk, short, row, group, shares, causal, seed):
    """dQ, dK and dV through the split kernels (dQ's and dK/dV's, and the forward's) against the
    unsplit ones, NaN for NaN: one token to 130, Tq <= Tk, GQA, a non-finite value in q, k or v
    (the backward's sanitizing variants then run unsplit after the split ones)."""
    q, k, v, go, spec, dec = _property_case(kind, poison, Tk, short, row, group, seed)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    attn = ts.compile(spec, causal=causal, backend="triton")
    want = _grads(attn, q, k, v, dec, go)
    with split(shares), recorded_workspaces() as made:
        got = _grads(attn, q, k, v, dec, go)
        assert not counters_left(made)
    for a, b, what in zip(got, want, ("out", "dq", "dk", "dv"), strict=True):
        assert _close(a, b, atol=5e-5), what


@pytest.mark.parametrize("kind", ["causal", "hash", "drop"])
@pytest.mark.parametrize(("tensor", "value"), [("v", float("inf")), ("v", float("nan")), ("k", float("nan"))])
def test_a_non_finite_key_reaches_only_the_rows_that_keep_it_when_split(kind, tensor, value):
    """tests/test_nan_containment_tiles.py's containment through the split forward (3 key tiles:
    windows of 1), sanitizing in its own launch and through its pair."""
    import test_nan_containment_tiles as contained

    for paired in (False, True):
        with split(), sanitize_in_pairs() if paired else contextlib.nullcontext():
            contained.test_a_non_finite_key_reaches_only_the_rows_that_keep_it("triton", kind, tensor, value)
            contained.test_a_non_finite_query_reaches_only_its_own_row_and_its_keys("triton")


@pytest.mark.parametrize("paired", [False, True], ids=["forward_in_one_launch", "forward_pair"])
@pytest.mark.parametrize("name", ["hash", "perhead"])
def test_the_split_forward_folds_the_poison(name, paired, monkeypatch):
    """tests/test_no_host_sync.py's folded poison (given ids checked on the device, one out of
    range) through the split forward: its merging share stores the poisoned output and lse."""
    import test_no_host_sync as no_sync

    monkeypatch.setattr(no_sync.decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    with split():
        no_sync.test_the_folded_poison_reaches_what_the_product_did(name, True, paired, None)


def test_unsplit_blocks_turns_the_splits_off_and_unsplit_key_blocks_dkdvs():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn((1, 2, 130, 16), generator=g, requires_grad=True) for _ in range(3))
    go = torch.randn((1, 2, 130, 16), generator=g)
    attn = ts.compile(ts.Dense(), causal=True, backend="triton")
    with override_config(fwd_split=0, dq_split=0, dkdv_split=0):
        want = _grads(attn, q, k, v, None, go)
    with split():
        with op.unsplit_blocks():
            assert all(torch.equal(a, b) for a, b in zip(_grads(attn, q, k, v, None, go), want, strict=True))
        got = _grads(attn, q, k, v, None, go)
        # split: the shares' merge and sums round otherwise (the output, and the gradients beyond what it moves)
        assert not any(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        with op.unsplit_key_blocks():  # dK/dV's alone
            keys_unsplit = _grads(attn, q, k, v, None, go)
    with override_config(fwd_split=4, dq_split=4, dkdv_split=0, split_programs=10**9, split_all=1):
        assert all(torch.equal(a, b) for a, b in zip(keys_unsplit, _grads(attn, q, k, v, None, go), strict=True))


def test_the_default_splits_only_groups_that_fuse_dense_heads(monkeypatch):
    """``fwd_split``, ``dq_split`` and ``dkdv_split`` without ``split_all``: a PerHead whose dense head the plan
    fuses with its Hash heads (costs as a GPU's, where one launch is cheaper than two: as
    tests/planner/test_plan.py's fused-triton plans) splits, its output still the reference's; a
    Hash alone does not."""
    from tilesparse.planner import CostTable
    from tilesparse.planner import plan as plan_module

    line = [0.0, 0.001]
    costs = {"source": "test", "skips_tiles": True, "floor_ms": {"fwd": 1.0, "fwd_bwd": 1.0},
             "stages": {"attend": {"fwd": line, "fwd_bwd": line}}}
    table = CostTable.from_dict({"meta": {}, "devices": {"cpu": {"triton": costs}}})
    monkeypatch.setattr(plan_module, "default_costs", lambda: table)
    made = []
    init = op.Launches.__init__

    def spy(self, *args, **kw):
        init(self, *args, **kw)
        made.append(self)

    monkeypatch.setattr(op.Launches, "__init__", spy)
    g = torch.Generator().manual_seed(6)
    q = torch.randn((1, 4, 150, 16), generator=g, requires_grad=True)
    k, v = (torch.randn((1, 4, 150, 16), generator=g, requires_grad=True) for _ in range(2))
    go = torch.randn((1, 4, 150, 16), generator=g)
    with override_config(fwd_split=4, dq_split=4, dkdv_split=4, split_programs=10**9):
        for spec, splits in ((ts.PerHead(dense_heads=[1], rest=ts.Hash(buckets=3)), True), (ts.Hash(buckets=3), False)):
            made.clear()
            attn = ts.compile(spec, causal=True)
            dec = given_decisions(attn, q, k)
            got = _grads(attn, q, k, v, dec, go)
            assert [a.backend.NAME for a in attn.plan(q, k, v).assignments] == ["triton"]
            assert [launches.mixed for launches in made] == [splits], spec
            assert [launch.work is not None for launch in (made[0].fwd, *made[0].backward)] == [splits] * 3
            want = attn.reference(q, k, v, decisions=dec)
            torch.testing.assert_close(got[0], want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("name", ["qkdrop", "hash"])
def test_the_build_zeroes_the_split_counters_after_its_flags(name, monkeypatch):
    """The Triton build's index buffer ends with the split counters, one per batch-head and
    block of the larger side, after the two non-finite flags; its launch zeroes them in a buffer
    that held garbage. A split forward+backward on that group, and on the group without flags
    of its own (the op's flags then come with counters: ``nonfinite.new_flags``), gives the
    unsplit results and leaves the counters zero."""
    from tilesparse.backends import buffers

    real = buffers.BufferPool._new

    def garbage(self, stream):
        entry = real(self, stream)
        entry[0].fill_(7)
        return entry

    monkeypatch.setattr(buffers.BufferPool, "_new", garbage)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn((1, 4, 200, 16), generator=gen, requires_grad=True)  # Tq = Tk: Triton's build
    k, v = (torch.randn((1, 2, 200, 16), generator=gen, requires_grad=True) for _ in range(2))
    go = torch.randn((1, 4, 200, 16), generator=gen)
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    (g,) = attn.prepare(q, k, v, decisions=given_decisions(attn, q, k)).groups
    counters = counters_after_flags(g.flags[1], 4 * max(g.q_ranges.shape[2], g.k_ranges.shape[2]))
    assert not counters.any(), "the build left counters unzeroed"

    def run(group):
        out = op.sparse_attention(q, k, v, group, 0.25, tile_config(16, q.dtype, q.device))
        return (out, *torch.autograd.grad(out, (q, k, v), go))

    want = run(g)
    with split(3), recorded_workspaces() as made:
        got, bare = run(g), run(replace(g, flags=None))
    assert len(made.works) == 6, "not every launch split"
    assert not counters.any() and not counters_left(made)
    assert made.counters[1].numel() == counters.numel()  # new_flags' own, as many
    for a, b, c, what in zip(got, bare, want, ("out", "dq", "dk", "dv"), strict=True):
        torch.testing.assert_close(a, c, atol=2e-6, rtol=2e-6, msg=what)
        assert torch.equal(a, b), what
