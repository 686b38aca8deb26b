"""The planner's rules, each on its own: dense groups go to the cheapest dense backend,
exactly-dense masks are simplified and may then run dense, a high visited fraction never sends
a drop or hash mask to dense attention (the plan says so instead), PerHead's groups run
separately or fused by cost, ties go to registration order, refusals and errors share one
format, a backend's and an index builder's FUSIONS become recorded graph contractions, the
index builder is chosen by its own price, and a builder that hashes the lsh buckets does it
inside its build when the plan says so.

The device rules are checked on the CPU with synthetic cost tables (the real backends, priced
as a GPU would price them); the shipped table is checked in test_cost.py. CPU only.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends import BUILDERS, REGISTRY, Backend, HashingBuilder
from tilesparse.backends.base import select_heads
from tilesparse.execute import filled_dense_heads
from tilesparse.ir import DotScore, FeatureDotScore, check_inputs, lower
from tilesparse.planner import CostTable, make_plan
from tilesparse.patterns import criteria
from tilesparse.planner import plan as plan_module
from tilesparse.planner.plan import NoBackendError
from tilesparse.testing import assert_equivalent, specs


def entry(fixed: float, per_unit_us: float, *, floor: float = 0.0, skips: bool = False) -> dict:
    line = [fixed, per_unit_us]
    return {
        "source": "test",
        "skips_tiles": skips,
        "floor_ms": {"fwd": floor, "fwd_bwd": floor},
        "stages": {"attend": {"fwd": line, "fwd_bwd": line}},
    }


# a GPU-like table for the CPU: sdpa is the fast dense kernel, the executor skips tiles with a
# host floor (as Triton does), the reference is dense and slow
GPU_LIKE = {
    "sdpa": entry(0.03, 0.004, floor=0.03),
    "executor": entry(0.1, 0.006, floor=0.9, skips=True),
    "reference": entry(0.3, 0.5, floor=0.3),
}


def table(entries: dict) -> CostTable:
    return CostTable.from_dict({"meta": {}, "devices": {"cpu": entries}})


def inputs(B=1, H=4, T=4096, D=64, dtype=torch.float16, grad=False):
    q, k, v = (torch.zeros(B, h, T, D, dtype=dtype, requires_grad=grad) for h in (H, H, H))
    return check_inputs(q, k, v)


def plan_of(spec, costs=GPU_LIKE, backend="auto", causal=True, **kw):
    return make_plan(lower(spec, causal=causal), inputs(**kw), backend=backend, has_decide=True, costs=table(costs))


def backends_of(plan):
    return [a.backend.NAME for a in plan.assignments]


def test_a_dense_spec_goes_to_the_cheapest_dense_backend():
    assert backends_of(plan_of(ts.Dense())) == ["sdpa"]
    slow_sdpa = {**GPU_LIKE, "sdpa": entry(0.03, 0.6)}
    assert backends_of(plan_of(ts.Dense(), slow_sdpa)) == ["executor"]
    # on the CPU's shipped table only the reference is a candidate
    cpu = make_plan(lower(ts.Dense(), causal=True), inputs(T=64), has_decide=False)
    assert backends_of(cpu) == ["reference"]


def test_ties_go_to_registration_order():
    same = {n: entry(1.0, 0.0) for n in ("sdpa", "reference")}
    names = list(REGISTRY)
    assert backends_of(plan_of(ts.Dense(), same)) == [min(("sdpa", "reference"), key=names.index)]


def test_the_choice_follows_the_visited_fraction():
    # the executor skips tiles: cheaper than dense sdpa when few are visited
    assert backends_of(plan_of(ts.Hash(buckets=64), {**GPU_LIKE, "sdpa": entry(0.03, 0.004)})) == ["executor"]
    # a sparse mask sdpa cannot run still goes to the cheapest backend that can
    costly_executor = {**GPU_LIKE, "executor": entry(50.0, 0.006, skips=True)}
    assert backends_of(plan_of(ts.Hash(buckets=64), costly_executor)) == ["reference"]


def test_exactly_dense_masks_are_simplified_and_may_run_dense():
    for spec in (ts.Hash(buckets=1), ts.TopKFeatures(k=64), ts.Hybrid(parts=[ts.Hash(buckets=1), ts.TopKFeatures(k=64)])):
        plan = plan_of(spec)
        (a,) = plan.assignments
        assert a.backend.NAME == "sdpa", spec
        assert a.lowered is not None and "simplified exactly" in plan.describe()
    # one bucket without attending to itself is strictly causal: sdpa cannot, the rest can
    (a,) = plan_of(ts.Hash(buckets=1, attend_self=False)).assignments
    assert a.backend.NAME != "sdpa" and a.group.layout.value == "identity"
    assert "k<q" in a.group.describe()
    # one bucket among drops: still a drop mask
    (a,) = plan_of(ts.Hybrid(parts=[ts.Hash(buckets=1), ts.QKDrop(keep=0.5)])).assignments
    assert a.group.layout.value == "compact" and a.backend.NAME != "sdpa"


@pytest.mark.parametrize("spec", [ts.QKDrop(keep=1.0), ts.Hash(buckets=2)], ids=str)
def test_a_dense_visited_fraction_keeps_the_sparse_kernel_and_says_so(spec):
    # at T=256 every tile is visited: dense sdpa would be cheaper but is not exact for these masks
    plan = plan_of(spec, T=256)
    (a,) = plan.assignments
    assert a.backend.NAME != "sdpa" and a.visited == 1.0
    assert any("would be cheaper" in n and "not exact" in n for n in a.notes), a.notes
    assert "note: dense attention (sdpa" in plan.describe()
    # when the sparse plan is the cheaper one there is nothing to say
    (a,) = plan_of(ts.Hash(buckets=64), {**GPU_LIKE, "executor": entry(0.0, 0.001, skips=True)}).assignments
    assert not a.notes


def test_per_head_groups_run_separately_or_fused_by_cost():
    spec = ts.PerHead(dense_heads=[0, 1], rest=ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]))
    # device bound: the dense heads are cheaper on sdpa than as dense tiles of the executor
    device_bound = {**GPU_LIKE, "executor": entry(0.1, 0.006, skips=True)}
    separate = plan_of(spec, device_bound, T=16384)
    assert backends_of(separate) == ["sdpa", "executor"]
    assert [a.heads for a in separate.assignments] == [(0, 1), (2, 3)]
    assert separate.estimated_ms == pytest.approx(sum(a.split[1] for a in separate.assignments))
    # host bound (the executor's floor, as Triton's): a second call only adds host time, so one
    # launch, the dense heads run with one bucket and every token kept
    fused = plan_of(spec)
    (a,) = fused.assignments
    assert a.backend.NAME == "executor" and a.heads == (0, 1, 2, 3) and a.dense_heads == (0, 1)
    assert 0.5 < a.visited < 1 and fused.estimated_ms == pytest.approx(0.9)
    assert any("dense heads [0, 1] in the same launch" in f for f in fused.fusions)
    # never fused where it would change the result: a strict causal rest, a feature-sparse score
    for rest in (ts.Hash(buckets=4, attend_self=False), ts.TopKFeatures(k=8)):
        plan = plan_of(ts.PerHead(dense_heads=[0], rest=rest))
        assert len(plan.assignments) == 2, rest


@pytest.mark.parametrize("costs", ["separate", "fused", "fused-triton"])
def test_per_head_plans_run_exactly(costs, monkeypatch):
    # fused: one backend for everything (the reference, or the Triton kernels in the
    # interpreter, whose host floor makes one launch cheaper); separate: sdpa for the dense heads
    entries = {
        "fused": {"reference": entry(0.05, 60.0, floor=0.05)},
        "fused-triton": {"triton": entry(0.0, 0.001, floor=1.0, skips=True)},
        "separate": {"sdpa": entry(0.0, 0.001), "executor": entry(0.0, 1.0, skips=True)},
    }[costs]
    monkeypatch.setattr(plan_module, "default_costs", lambda: table(entries))
    spec = ts.PerHead(dense_heads=[1, 2], rest=ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop(keep=0.6)]))
    attn = ts.compile(spec)
    q, k, v = (torch.randn(2, 4, 70, 16, requires_grad=True) for _ in range(3))
    plan = attn.plan(q, k, v)
    assert len(plan.assignments) == (2 if costs == "separate" else 1)
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(0))
    assert_equivalent(attn, q, k, v, decisions=dec)


def test_fused_dense_heads_built_by_the_triton_sort_as_from_filled_decisions(monkeypatch):
    """The Triton builder builds a PerHead's fused dense heads itself (a flag its sort launch
    reads): the same output and gradients, bit for bit, as the build of decisions filled every
    call (filled_dense_heads(), the path of a builder that cannot); with a keep predicate and a
    bucket one, and the fill's copies gone from the call (two torch ops fewer)."""
    monkeypatch.setattr(plan_module, "default_costs", lambda: table({"triton": entry(0.0, 0.001, floor=1.0, skips=True)}))
    spec = ts.PerHead(dense_heads=[0, 2], rest=ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop(keep=0.6)]))
    attn = ts.compile(spec, backend="triton")
    q, k, v = (torch.randn(1, 4, 70, 16, requires_grad=True) for _ in range(3))
    (a,) = attn.plan(q, k, v).assignments
    assert a.dense_heads == (0, 2) and a.builder.binds_dense_heads(check_inputs(q, k, v))
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(0))
    go = torch.randn_like(q)

    def run():
        out = attn(q, k, v, decisions=dec)
        return (out, *torch.autograd.grad(out, (q, k, v), go))

    with mock.patch.object(torch.Tensor, "index_fill", side_effect=AssertionError("filled")):
        native = run()
    with filled_dense_heads():
        filled = run()
    for x, y in zip(native, filled, strict=True):
        assert torch.equal(x, y)
    assert_equivalent(attn, q, k, v, decisions=dec)


def test_simplified_plans_run_exactly(monkeypatch):
    monkeypatch.setattr(plan_module, "default_costs", lambda: table({**GPU_LIKE, "executor": entry(9.0, 1.0)}))
    q, k, v = (torch.randn(1, 2, 90, 16, requires_grad=True) for _ in range(3))
    for spec in (ts.Hash(buckets=1), ts.TopKFeatures(k=16), ts.Hash(buckets=1, attend_self=False)):
        attn = ts.compile(spec)
        assert attn.plan(q, k, v).assignments[0].lowered is not None
        assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k))


def test_refusals_and_errors_share_one_format():
    plan = plan_of(ts.Hash(buckets=4))
    refused = dict(plan.assignments[0].refused)
    assert "sdpa" in refused and "layout sort is not identity" in "; ".join(refused["sdpa"])
    line = "sdpa: " + "; ".join(refused["sdpa"])
    assert f"refused {line}" in plan.describe()
    with pytest.raises(ts.NoBackendError) as forced:
        plan_of(ts.Hash(buckets=4), backend="sdpa")
    assert f"backend 'sdpa' cannot run head group heads[rest] layout=sort" in str(forced.value)
    assert f"\n  {line}" in str(forced.value)


def test_when_no_backend_can_run_the_error_lists_every_candidate():
    with pytest.raises(ts.NoBackendError) as info:
        plan_of(ts.Hash(buckets=4), {"sdpa": GPU_LIKE["sdpa"]})
    text = str(info.value)
    assert text.startswith("no backend can run head group heads[rest] layout=sort")
    for name in REGISTRY:
        assert f"\n  {name}: " in text, name
    assert "executor: no cost entry for cpu in the cost model" in text
    assert "sdpa: layout sort is not identity" in text


class _HashingTorchBuilder(HashingBuilder):
    """A stand-in for CuPy's index build on the CPU: the IR's torch build, and the lsh
    criterion's torch ops as its hashing (alone, or first thing in its build, as CuPy's first
    launch would); it counts both."""

    NAME = "test-index"
    STAGES = ("decide", "layout", "ranges")
    FUSIONS = (("decide", "layout", "ranges"), ("layout", "ranges"))
    hashed = fused = 0

    def hash_reasons(self, inputs, buckets):
        return []

    def hash(self, inputs, lsh):
        type(self).hashed += 1
        self._fill(inputs, lsh)

    def build(self, program, group, heads, decisions, inputs):
        return BUILDERS["torch"].build(program, group, heads, decisions, inputs)

    def build_hashing(self, program, group, heads, decisions, inputs, lsh):
        type(self).fused += 1
        self._fill(inputs, lsh)
        return self.build(program, group, heads, decisions, inputs)

    @staticmethod
    def _fill(inputs, lsh):
        a, b = criteria.lsh_matmul(inputs.q, inputs.k_per_query_head(), lsh.rotations.to(inputs.dtype), lsh.buckets)
        lsh.q_bucket.copy_(a), lsh.k_bucket.copy_(b)


class _FusingBuilder(_HashingTorchBuilder):
    """A builder that hashes and sorts in one pass, then builds the ranges."""

    NAME = "test-fusing"
    FUSIONS = (("decide", "layout"),)


class _FusingBackend(Backend):
    """An attention backend whose own builder is ``_FusingBuilder``; it attends through the
    reference."""

    NAME = "test-fusing"
    INDEX_BUILDER = "test-fusing"

    def attend(self, g, inputs):
        return REGISTRY["reference"].attend(g, inputs)


def test_a_new_backend_and_builder_plug_in_with_their_stages_fusions_and_cost_entry():
    REGISTRY[_FusingBackend.NAME], BUILDERS[_FusingBuilder.NAME] = _FusingBackend(), _FusingBuilder()
    try:
        plan = make_plan(lower(ts.Hash(buckets=4), causal=True), inputs(), has_decide=True, lsh_decide=True,
                         costs=table({**GPU_LIKE, "test-fusing": entry(0.0, 0.0001, skips=True)}))  # fmt: skip
        # forced, it runs exactly
        attn = ts.compile(ts.Hash(buckets=4), backend="test-fusing")
        q, k, v = torch.randn(3, 1, 2, 40, 16).unbind(0)
        dec = attn.decide(q, k)
        torch.testing.assert_close(attn(q, k, v, decisions=dec), attn.reference(q, k, v, decisions=dec))
    finally:
        del REGISTRY[_FusingBackend.NAME], BUILDERS[_FusingBuilder.NAME]
    (a,) = plan.assignments
    assert (a.backend.NAME, a.builder.NAME, a.fused_hash) == ("test-fusing", "test-fusing", True)
    nodes = {n: d["backend"] for n, d in plan.graph.nodes(data=True)}
    assert nodes == {"0:decide+layout": "test-fusing", "0:ranges": "test-fusing", "0:attend": "test-fusing"}
    assert plan.fusions == ("group 0: decide+layout fused in test-fusing",)
    assert "stages: decide+layout[test-fusing] -> ranges[test-fusing] -> attend[test-fusing]" in plan.describe()
    assert "index builder: test-fusing (hashes the lsh buckets in its first launch)" in plan.describe()


def test_attention_backends_and_index_builders_are_separate_roles():
    q = inputs(T=64)
    group = lower(ts.Hash(buckets=4), causal=True).groups[0]
    assert not any(hasattr(b, "build") or hasattr(b, "prepare") for b in REGISTRY.values())
    assert not any(hasattr(b, "attend") for b in BUILDERS.values())
    assert REGISTRY["triton"].STAGES == ("gather", "attend", "scatter")
    assert BUILDERS["triton"].STAGES == ("layout", "ranges")
    assert {n: b.INDEX_BUILDER for n, b in REGISTRY.items() if b.needs_prepare} == {
        "cupy": "cupy", "executor": "torch", "reference": "torch", "triton": "triton",
    }  # fmt: skip
    assert BUILDERS["cupy"].not_supported_reasons(group, q)[0] == "device 'cpu' not in ('cuda',)"
    assert isinstance(BUILDERS["cupy"], HashingBuilder) and isinstance(BUILDERS["triton"], HashingBuilder)


def test_triton_plans_record_their_fusions():
    plan = make_plan(lower(ts.Hash(buckets=4), causal=True), inputs(T=64, dtype=torch.float32), backend="triton", has_decide=True)
    assert plan.fusions == (
        "group 0: layout+ranges fused in triton",
        "group 0: gather+attend+scatter fused in triton",
    )
    assert "stages: decide[torch] -> layout+ranges[triton] -> gather+attend+scatter[triton]" in plan.describe()
    assert "index builder: triton\n" in plan.describe()


def test_head_groups_are_selected_as_views():
    t = torch.randn(2, 6, 8, 16)
    assert select_heads(t, (2, 3, 4), 6)._base is t
    assert select_heads(t, tuple(range(6)), 6) is t
    assert select_heads(t, (0, 2), 6)._base is None  # not a run: a copy
    torch.testing.assert_close(select_heads(t, (0, 2), 6), t[:, [0, 2]])


def index_table(**lines) -> CostTable:
    t = {"meta": {}, "devices": {"cpu": GPU_LIKE}, "index": {"cpu": {n.replace("_", "-").replace("-lsh", "+lsh"): v
                                                                      for n, v in lines.items()}}}  # fmt: skip
    return CostTable.from_dict(t)


@pytest.fixture
def index_builder():
    BUILDERS[_HashingTorchBuilder.NAME] = _HashingTorchBuilder()
    yield BUILDERS[_HashingTorchBuilder.NAME]
    del BUILDERS[_HashingTorchBuilder.NAME]


def test_the_cheaper_index_builder_builds_another_backends_groups(index_builder):
    spec = lower(ts.Hash(buckets=4), causal=True)
    cheap = make_plan(spec, inputs(), has_decide=True, costs=index_table(torch=[1.0, 0.0], test_index=[0.2, 0.0]))
    (a,) = cheap.assignments
    assert (a.backend.NAME, a.builder.NAME, a.fused_hash) == ("executor", "test-index", False)
    assert a.index_costs == (("test-index", 0.2), ("torch", 1.0))
    nodes = {n: d["backend"] for n, d in cheap.graph.nodes(data=True)}
    assert nodes == {"0:decide": "torch", "0:layout+ranges": "test-index", "0:attend": "executor"}
    assert "index build estimated: test-index 0.2 ms, torch 1 ms" in cheap.describe()
    assert "refused index builder cupy: device 'cpu' not in ('cuda',)" in cheap.describe()
    dear = make_plan(spec, inputs(), has_decide=True, costs=index_table(torch=[1.0, 0.0], test_index=[2.0, 0.0]))
    assert dear.assignments[0].builder is BUILDERS["torch"]
    # a forced backend builds with its own builder; without index lines nothing is compared
    forced = make_plan(spec, inputs(), backend="executor", has_decide=True, costs=index_table(torch=[1.0, 0], test_index=[0.2, 0]))
    assert forced.assignments[0].builder is BUILDERS["torch"] and forced.assignments[0].index_costs == ()
    assert plan_of(ts.Hash(buckets=4)).assignments[0].index_costs == ()


def test_a_builders_host_time_counts_in_its_price_and_in_the_floor(index_builder):
    """``index_host``: a builder whose line is cheaper but whose launches cost the host more
    loses where the sum is dearer; where it wins, the call's floor carries its host time."""
    spec = lower(ts.Hash(buckets=4), causal=True)
    base = index_table(torch=[1.0, 0.0], test_index=[0.2, 0.0]).to_dict()

    def plan_with(host_ms: float):
        costs = CostTable.from_dict({**base, "index_host": {"source": "a test", "cpu": {"test-index": host_ms}}})
        assert costs.index_host_ms("cpu", "test-index") == host_ms and costs.index_host_ms("cpu", "torch") == 0.0
        assert CostTable.from_dict(costs.to_dict()) == costs  # the JSON round trip keeps it and its source
        return make_plan(spec, inputs(), has_decide=True, costs=costs).assignments[0]

    dear = plan_with(0.9)  # 0.2 + 0.9 > 1.0
    assert dear.builder is BUILDERS["torch"] and dear.index_costs == (("torch", 1.0), ("test-index", 1.1))
    cheap = plan_with(0.5)  # 0.2 + 0.5 < 1.0
    assert cheap.builder.NAME == "test-index" and cheap.index_costs == (("test-index", 0.7), ("torch", 1.0))
    floor, work = cheap.split
    assert floor == pytest.approx(dear.split[0] + 0.5) and work == pytest.approx(max(0.0, dear.split[1] - 0.8))


def test_a_builder_hashes_the_lsh_decisions_when_that_is_cheaper(index_builder):
    spec = lower(ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.5)]), causal=True)
    costs = index_table(torch=[0.5, 0.0], lsh=[0.3, 0.0], test_index=[0.5, 0.0], test_index_lsh=[0.6, 0.0])
    plan = make_plan(spec, inputs(), has_decide=True, lsh_decide=True, costs=costs)
    (a,) = plan.assignments
    assert (a.builder.NAME, a.fused_hash) == ("test-index", True)
    assert a.index_costs == (("test-index+lsh", 0.6), ("torch", 0.8))
    assert "stages: decide+layout+ranges[test-index] -> attend[executor]" in plan.describe()
    # without the lsh criterion deciding (decisions from another criterion), no hashing to fuse
    plain = make_plan(spec, inputs(), has_decide=True, lsh_decide=False, costs=costs)
    assert (plain.assignments[0].builder.NAME, plain.assignments[0].fused_hash) == ("torch", False)
    # PerHead's rest, alone or with the dense heads fused in, never hashes: the builder fills
    # every head's buffer with buckets
    per_head = lower(ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=4)), causal=True)
    for slow_sdpa in (False, True):
        table = costs.to_dict()
        table["devices"]["cpu"]["sdpa"] = entry(50.0, 0.0, floor=50.0) if slow_sdpa else entry(0.0, 0.0)
        plan = make_plan(per_head, inputs(), has_decide=True, lsh_decide=True, costs=CostTable.from_dict(table))
        assert len(plan.assignments) == (1 if slow_sdpa else 2)
        assert not any(a.fused_hash for a in plan.assignments)


def test_the_fused_hash_runs_in_the_builder_and_the_call_stays_exact(index_builder, monkeypatch):
    """The call path of a fused hash, on the CPU: the decide step draws the lsh rotation and
    leaves the buckets to the builder (as on CUDA with cupy), whose build fills them before
    reading them; the output equals the reference over attn.decide's decisions with the same
    generator (hashed by the same builder, alone)."""
    costs = index_table(torch=[0.5, 0.0], lsh=[0.3, 0.0], test_index=[0.5, 0.0], test_index_lsh=[0.6, 0.0])
    monkeypatch.setattr(plan_module, "default_costs", lambda: costs)
    spec = ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.6)])
    attn = ts.compile(spec, causal=True)
    q, k, v = torch.randn(3, 1, 4, 96, 16, generator=torch.Generator().manual_seed(0)).unbind(0)
    assert attn.plan(q, k, v).assignments[0].fused_hash
    _HashingTorchBuilder.hashed = _HashingTorchBuilder.fused = 0
    out = attn(q, k, v, generator=torch.Generator().manual_seed(7))
    assert (_HashingTorchBuilder.fused, _HashingTorchBuilder.hashed) == (1, 0)
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(7))  # hashed at once by the builder
    assert (_HashingTorchBuilder.fused, _HashingTorchBuilder.hashed) == (1, 1)
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec))
    # the buckets are the criterion's: the same draws, in the same order
    want = spec.decide(q, k, generator=torch.Generator().manual_seed(7))
    assert torch.equal(dec.q_bucket, want.q_bucket) and torch.equal(dec.k_bucket, want.k_bucket)
    assert torch.equal(dec.q_keep, want.q_keep)
    # given decisions: a plan of its own that hashes nothing, so the builder hashes nothing
    assert not attn.plan(q, k, v, decisions=dec).assignments[0].fused_hash
    attn(q, k, v, decisions=dec)
    assert (_HashingTorchBuilder.fused, _HashingTorchBuilder.hashed) == (1, 1)


def test_buckets_no_build_took_are_hashed_before_the_call_returns(index_builder, monkeypatch):
    """A plan run up to the decide step only (no index step takes the deferred buckets): the
    builder hashes them at the end, so the decisions hold the criterion's buckets."""
    from tilesparse.execute import execute

    costs = index_table(torch=[0.5, 0.0], lsh=[0.3, 0.0], test_index=[0.5, 0.0], test_index_lsh=[0.6, 0.0])
    monkeypatch.setattr(plan_module, "default_costs", lambda: costs)
    attn = ts.compile(ts.Hash(buckets=4), causal=True)
    q, k, v = torch.randn(3, 1, 4, 96, 16, generator=torch.Generator().manual_seed(0)).unbind(0)
    inp = check_inputs(q, k, v)
    plan = attn.plan(q, k, v)
    assert plan.assignments[0].fused_hash
    _HashingTorchBuilder.hashed = _HashingTorchBuilder.fused = 0
    ex = execute(plan, inp, attn._decide_step(inp, None, torch.Generator().manual_seed(3)), until="decide")
    assert (_HashingTorchBuilder.fused, _HashingTorchBuilder.hashed, ex.deferred) == (0, 1, None)
    want = ts.Hash(buckets=4).decide(q, k, generator=torch.Generator().manual_seed(3))
    assert torch.equal(ex.decisions.q_bucket, want.q_bucket) and torch.equal(ex.decisions.k_bucket, want.k_bucket)


@pytest.mark.parametrize(
    ("spec", "backend"),
    [
        (ts.Hash(buckets=4), "executor"),
        (ts.PerHead(dense_heads=[0], rest=ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.5)])), "auto"),
        (ts.Dense(), "auto"),
    ],
    ids=["one-group", "per-head", "dense"],
)
def test_the_call_executes_the_plans_steps_in_a_graph_order(spec, backend, monkeypatch):
    """The steps cover every node of the stage graph in a topological order, describe()
    prints them, and a call (and prepare) runs exactly them, in that order."""
    import networkx as nx

    import tilesparse.execute as execute

    attn = ts.compile(spec, backend=backend)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn((1, 4, 96, 16), generator=g) for _ in range(3))
    dec = attn.decide(q, k, generator=g)
    plan = attn.plan(q, k, v, decisions=dec)
    steps = plan.steps
    assert steps[0].kind == "decide"
    first = {n: min(i for i, s in enumerate(steps) if n in s.nodes) for n in plan.graph.nodes}  # every node covered
    assert all(first[u] <= first[v] for u, v in plan.graph.edges), (steps, list(plan.graph.edges))
    assert list(nx.topological_sort(plan.graph))  # a DAG
    assert "steps, as a call runs them: " + " -> ".join(s.describe() for s in steps) in plan.describe()

    ran = []

    def recording(bind):  # a bound step that records its step each time it runs
        def bind_recording(plan, step, inputs):
            run = bind(plan, step, inputs)
            return lambda *a: (ran.append(step), run(*a))[1]

        return bind_recording

    for kind, bind in list(execute._BIND.items()):
        monkeypatch.setitem(execute._BIND, kind, recording(bind))
    out = attn(q, k, v, decisions=dec)
    assert ran == list(steps)
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec), atol=1e-4, rtol=1e-4)
    ran.clear()
    attn.prepare(q, k, v, decisions=dec)
    assert ran == [s for s in steps if s.kind in ("decide", "index")]


class _Tiles32Backend(Backend):
    """A backend whose kernels read 32x32 tiles and run dot-product scores only (as Triton's
    fp32 D=256 tiles beside the CuPy feature kernels' 64x64); it attends through the executor."""

    NAME = "test-tiles32"
    TILES = (32, 32)
    SCORE = DotScore

    def _reasons(self, group, inputs):
        return [] if isinstance(group.score, self.SCORE) else [f"{self.SCORE.__name__} scores only"]

    def blocks(self, inputs):
        return self.TILES

    def attend(self, g, inputs):
        return REGISTRY["executor"].attend(g, inputs)


class _Tiles16FeatureBackend(_Tiles32Backend):
    """Feature-sparse scores only, on 16x32 tiles."""

    NAME = "test-tiles16-feature"
    TILES = (16, 32)
    SCORE = FeatureDotScore


def test_the_groups_of_a_plan_share_one_tile_size(monkeypatch):
    # the cheapest backend of the dense heads wants 32x32 tiles, the feature-sparse rest's only
    # backends 64x64: the index tensors have one size, so the plan that runs every group at one
    # size is kept, and the refused backend says why
    monkeypatch.setitem(REGISTRY, _Tiles32Backend.NAME, _Tiles32Backend())
    costs = {"test-tiles32": entry(0.0, 0.001, skips=True), "executor": entry(0.0, 0.01, skips=True)}
    monkeypatch.setattr(plan_module, "default_costs", lambda: table(costs))
    spec = ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=4))
    plan = plan_of(spec, costs, T=256, D=16)
    assert backends_of(plan) == ["executor", "executor"]
    assert (plan.program.block_q, plan.program.block_k) == (64, 64)
    assert "its kernels need 32x32 tiles; this plan's index tensors are built for 64x64" in plan.describe()
    # alone, the dense heads still get the 32x32 backend
    assert backends_of(plan_of(ts.QKDrop(keep=0.5), costs, T=256, D=16)) == ["test-tiles32"]
    attn = ts.compile(spec)
    q, k, v = (torch.randn(1, 3, 100, 16, requires_grad=True) for _ in range(3))
    assert {a.backend.NAME for a in attn.plan(q, k, v).assignments} == {"executor"}
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k, generator=torch.Generator().manual_seed(1)))


_TILED = {b.NAME: b for b in (_Tiles32Backend(), _Tiles16FeatureBackend())}


# two head groups as often as one: PerHead's dense heads beside a rest, often feature-sparse
_MIXED = st.builds(
    ts.PerHead,
    dense_heads=st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True),
    rest=specs(kinds=["topk_features", "hybrid", "hash", "qk_drop"], allow_per_head=False, max_buckets=4, max_k=4),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=st.one_of(_MIXED, specs(heads=4, max_buckets=4, max_k=4)),
    prices=st.fixed_dictionaries({n: st.sampled_from([0.001, 0.01, 0.1]) for n in ("executor", *_TILED)}),
    fixed=st.booleans(),
)
def test_any_mix_of_tile_sizes_plans_one_size_or_refuses_clearly(spec, prices, fixed):
    # backends wanting 64x64 (executor), 32x32 (dot scores) and 16x32 (feature scores) tiles,
    # priced at random: a plan has one tile size that every backend reading index tensors
    # uses, and runs exactly; or the planner refuses with a clear error
    costs = {n: entry(0.0 if fixed else 0.05, per_unit, skips=True) for n, per_unit in prices.items()}
    q, k, v = (torch.randn(1, 4, 40, 16, generator=torch.Generator().manual_seed(i)).requires_grad_() for i in range(3))
    with mock.patch.dict(REGISTRY, _TILED), mock.patch.object(plan_module, "default_costs", lambda: table(costs)):
        attn = ts.compile(spec)
        try:
            plan = attn.plan(q, k, v)
        except NoBackendError as e:
            assert "run head group" in str(e) or "need different tiles" in str(e), str(e)
            return
        inputs = check_inputs(q, k, v, scale=attn.scale)
        tiles = {a.backend.blocks(inputs) for a in plan.assignments if a.backend.needs_prepare}
        assert tiles <= {(plan.program.block_q, plan.program.block_k)}, plan.describe()
        assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k, generator=torch.Generator().manual_seed(3)))


def test_a_tile_size_neither_cheapest_backend_wants_can_run_the_plan():
    # the dense heads' cheapest backend wants 32x32, the feature-sparse rest's 16x32: neither
    # size runs both groups, the executor's 64x64 does; without the executor nothing does
    spec = ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=4))
    cheap = {n: entry(0.0, 0.001, skips=True) for n in _TILED}
    with mock.patch.dict(REGISTRY, _TILED):
        plan = plan_of(spec, {**cheap, "executor": entry(0.0, 0.1, skips=True)}, T=256, D=16)
        assert backends_of(plan) == ["executor", "executor"]
        assert (plan.program.block_q, plan.program.block_k) == (64, 64)
        with pytest.raises(NoBackendError, match=r"need different tiles and no one size \(32x32, 16x32, 64x64\)"):
            plan_of(spec, cheap, T=256, D=16)
