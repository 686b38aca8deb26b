"""The strategies of ``tilesparse.testing``: every draw is valid and within its bounds, fixed
values and strategies are honoured, each edge case the docs promise is reachable (shown with
``hypothesis.find``), bad arguments fail at once with a message saying how to fix them, and
the examples in the docs run. CPU only.
"""

import doctest

import pytest
import torch
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import tilesparse as ts
import tilesparse.testing.strategies as strategies_module
from tilesparse.testing import SPEC_KINDS, attention_inputs, decisions, specs

FIND = settings(max_examples=2000, database=None)


def parts_of(spec):
    rest = spec.rest if isinstance(spec, ts.PerHead) else spec
    return rest.parts if isinstance(rest, ts.Hybrid) else (rest,)


@settings(max_examples=60)
@given(spec=specs(heads=3, max_buckets=5, max_k=4, max_parts=2))
def test_specs_are_valid_and_within_bounds(spec):
    assert ts.parse_spec(spec.model_dump_json()) == spec
    if isinstance(spec, ts.PerHead):
        assert all(0 <= h < 3 for h in spec.dense_heads)
        assert not isinstance(spec.rest, ts.PerHead)
    if isinstance(getattr(spec, "rest", spec), ts.Hybrid):
        assert 1 <= len(parts_of(spec)) <= 2
    for p in parts_of(spec):
        if isinstance(p, ts.Hash):
            assert 1 <= p.buckets <= 5 and p.criterion == "lsh"
        elif isinstance(p, ts.TopKFeatures):
            assert 1 <= p.k <= 4
        elif isinstance(p, ts.QKDrop):
            assert 0 < p.keep <= 1


@settings(max_examples=30)
@given(spec=specs(kinds=["hash", "qk_drop"], allow_per_head=False, buckets=st.just(7), keep=0.5, attend_self=False))
def test_specs_honour_kinds_and_fixed_fields(spec):
    assert isinstance(spec, ts.Hash | ts.QKDrop)
    assert spec == ts.Hash(buckets=7, attend_self=False) or spec == ts.QKDrop(keep=0.5)


@pytest.mark.parametrize(
    "condition",
    [
        *(lambda s, kind=kind: s.kind == kind for kind in SPEC_KINDS),
        lambda s: isinstance(s, ts.PerHead) and len(s.dense_heads) == 4,
        lambda s: isinstance(s, ts.Hybrid) and len(s.parts) == 3,
        lambda s: isinstance(s, ts.Hash) and not s.attend_self,
        lambda s: isinstance(s, ts.PerHead) and isinstance(s.rest, ts.Hybrid),
    ],
)
def test_every_spec_shape_is_reachable(condition):
    find(specs(heads=4), condition, settings=FIND)


def _any_head(t, fn):
    return any(fn(t[b, h]) for b in range(t.shape[0]) for h in range(t.shape[1]))


def _query_without_key(dec, causal=True):
    """Some kept query whose kept (and, causally, earlier-or-same) keys are none."""
    q, k = dec.q_keep, dec.k_keep
    T = q.shape[-1]
    seen = k.cumsum(-1) if causal else k.sum(-1, keepdim=True).expand_as(k)
    return bool((q & (seen == 0)).any()) and T > 1


@pytest.mark.parametrize(
    "spec, condition",
    [
        (ts.QKDrop(), lambda d: _any_head(d.q_keep, lambda t: not t.any())),  # every query of a head dropped
        (ts.QKDrop(), lambda d: _any_head(d.k_keep, lambda t: not t.any())),  # every key dropped
        (ts.QKDrop(), lambda d: _any_head(d.q_keep, lambda t: t.all())),
        (ts.QKDrop(), _query_without_key),  # a query with no kept key
        (ts.Hash(buckets=4), lambda d: _any_head(d.q_bucket, lambda t: len(t.unique()) == 1)
         and bool((d.q_bucket == d.k_bucket).all())),  # all tokens in one bucket
        (ts.Hash(buckets=4), lambda d: bool((d.q_bucket.unsqueeze(-1) != d.k_bucket.unsqueeze(-2)).all(-1).any())
         and bool((d.q_bucket.unsqueeze(-1) == d.k_bucket.unsqueeze(-2)).any())),  # a query alone among sharing ones
        (ts.Hash(buckets=4), lambda d: d.q_bucket.dtype == torch.int64),
        (ts.Hash(buckets=4), lambda d: d.q_bucket.dtype == torch.int32),
        (ts.TopKFeatures(k=3), lambda d: bool((d.q_support == d.q_support[..., :1, :]).all())
         and bool((d.k_support == d.q_support).all())),  # every token keeps the same features
        (ts.TopKFeatures(k=3), lambda d: not bool((d.q_support.unsqueeze(-1) == d.k_support.unsqueeze(-2)).any())),
    ],
)  # fmt: skip
def test_every_edge_case_is_reachable(spec, condition):
    find(decisions(spec, (1, 2, 16, 8)), condition, settings=FIND)


@settings(max_examples=40)
@given(data=st.data())
def test_decisions_fit_the_spec_and_shape(data):
    shape = data.draw(st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 50), st.sampled_from([8, 32])))
    spec = data.draw(specs(heads=shape[1], max_k=shape[3]))
    dec = data.draw(decisions(spec, shape, device="cpu"))
    assert dec.present() == spec.decision_fields
    B, H, T, _ = shape
    for name in dec.present():
        t = getattr(dec, name)
        assert t.shape[:3] == (B, H, T) and t.device.type == "cpu"
    # the API accepts them as they are
    q = torch.zeros(shape)
    ts.compile(spec).prepare(q, q, q, decisions=dec)


@settings(max_examples=20)
@given(dec=decisions(st.sampled_from([ts.Hash(buckets=3), ts.TopKFeatures(k=2)]), st.just((2, 3, 7, 8))))
def test_spec_and_shape_may_be_strategies(dec):
    assert dec.present() in ({"q_bucket", "k_bucket"}, {"q_support", "k_support"})
    assert all(getattr(dec, n).shape[:3] == (2, 3, 7) for n in dec.present())


@settings(max_examples=20)
@given(dec=decisions(ts.QKDrop(), (2, 2, 400, 8), edge_cases=False))
def test_without_edge_cases_decisions_are_plain_random(dec):
    # a keep probability in [0.05, 0.95] over 400 tokens: an all-kept or all-dropped head has
    # odds below 1e-11 per head, so every head mixes kept and dropped tokens
    fractions = torch.cat([dec.q_keep, dec.k_keep]).float().mean(-1)
    assert bool(((fractions > 0) & (fractions < 1)).all())


@settings(max_examples=60)
@given(inputs=attention_inputs())
def test_attention_inputs_follow_the_contract(inputs):
    q, k, v = inputs
    B, H, T, D = q.shape
    assert k.shape == v.shape and k.shape[0] == B and k.shape[2:] == (T, D)
    assert H % k.shape[1] == 0 and D % 8 == 0 and 8 <= D <= 64 and 1 <= T <= 256 and 1 <= B <= 2 and 1 <= H <= 4
    assert q.dtype == k.dtype == v.dtype and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
    assert all(t.requires_grad and t.is_leaf and t.device.type == "cpu" for t in (q, k, v))
    assert torch.isfinite(q).all()


@settings(max_examples=20)
@given(inputs=attention_inputs(batch=3, heads=st.just(6), kv_heads=2, seqlen=5, head_dim=16, dtype=torch.bfloat16,
                               requires_grad=False))  # fmt: skip
def test_attention_inputs_honour_fixed_values(inputs):
    q, k, _ = inputs
    assert q.shape == (3, 6, 5, 16) and k.shape == (3, 2, 5, 16) and q.dtype == torch.bfloat16
    assert not q.requires_grad


@settings(max_examples=20)
@given(inputs=attention_inputs(heads=4, gqa=False))
def test_without_gqa_kv_heads_equal_heads(inputs):
    assert inputs[0].shape[1] == inputs[1].shape[1] == 4


@pytest.mark.parametrize(
    "condition",
    [
        lambda x: x[1].shape[1] < x[0].shape[1],  # grouped-query attention
        lambda x: x[0].shape[2] == 1,
        lambda x: x[0].shape[2] > 128 and x[0].shape[2] % 64 != 0,  # longer, not a multiple of the block
        lambda x: x[0].dtype == torch.bfloat16,
        lambda x: x[0].shape[-1] == 64,
    ],
)
def test_every_input_shape_is_reachable(condition):
    find(attention_inputs(), condition, settings=FIND)


@pytest.mark.parametrize(
    "build, says",
    [
        (lambda: specs(kinds=["sliding"]), "kinds has unknown kinds ['sliding']; choose from"),
        (lambda: specs(kinds="hash"), "pass a sequence of kind names"),
        (lambda: specs(kinds=[]), "kinds is empty"),
        (lambda: specs(heads=0), "heads=0: must be >= 1"),
        (lambda: specs(max_buckets=0), "max_buckets=0: must be in [1, 65536]"),
        (lambda: specs(max_k=300), "max_k=300: must be in [1, 256]"),
        (lambda: specs(max_parts=4), "max_parts=4: must be in [1, 3]"),
        (lambda: specs(keep=0.0), "keep=0.0: must be a float in (0, 1]"),
        (lambda: specs(buckets=2.5), "buckets=2.5: must be an int"),
        (lambda: specs(attend_self="no"), "attend_self='no': must be a bool"),
        (lambda: specs(allow_per_head=1), "allow_per_head=1: must be a bool"),
        (lambda: decisions("hash", (1, 1, 4, 8)), "is not a tilesparse spec"),
        (lambda: decisions(ts.Hash(), (1, 1, 4)), "pass (B, H, T, D), e.g. q.shape"),
        (lambda: decisions(ts.Hash(), (1, 1, 0, 8)), "T must be an int >= 1"),
        (lambda: decisions(ts.TopKFeatures(k=16), (1, 1, 4, 8)),
         "TopKFeatures.k=16 > D=8; draw specs with specs(max_k=8)"),
        (lambda: decisions(ts.PerHead(dense_heads=[2], rest=ts.Hash()), (1, 2, 4, 8)),
         "dense_heads [2] out of range for H=2; draw specs with specs(heads=2)"),
        (lambda: decisions(ts.Hash(), (1, 1, 4, 8), index_dtype=torch.int16), "must be torch.int32 or torch.int64"),
        (lambda: decisions(ts.Hash(), (1, 1, 4, 8), edge_cases=None), "edge_cases=None: must be a bool"),
        (lambda: attention_inputs(head_dim=12), "head_dim=12: must be a multiple of 8"),
        (lambda: attention_inputs(head_dim=512), "head_dim=512: must be in [8, 256]"),
        (lambda: attention_inputs(dtype=torch.float64), "dtype=torch.float64: must be one of"),
        (lambda: attention_inputs(heads=4, kv_heads=3), "kv_heads=3 must divide heads=4"),
        (lambda: attention_inputs(seqlen=0), "seqlen=0: must be >= 1"),
        (lambda: attention_inputs(batch="2"), "batch='2': must be an int, got str"),
        (lambda: attention_inputs(gqa="yes"), "gqa='yes': must be a bool"),
        (lambda: attention_inputs(device="nowhere"), "device='nowhere': not a torch device"),
    ],
)  # fmt: skip
def test_bad_arguments_fail_at_once_saying_how_to_fix_them(build, says):
    with pytest.raises(InvalidArgument) as info:
        build()
    assert says in str(info.value)


def test_mismatches_only_known_when_drawing_fail_at_draw_time():
    strategy = decisions(specs(kinds=["topk_features"], k=16, allow_per_head=False), (1, 1, 4, 8))
    with pytest.raises(InvalidArgument, match="TopKFeatures.k=16 > D=8"):
        find(strategy, lambda d: True, settings=FIND)
    strategy = attention_inputs(heads=st.just(4), kv_heads=st.just(3))
    with pytest.raises(InvalidArgument, match="kv_heads=3 does not divide heads=4"):
        find(strategy, lambda x: True, settings=FIND)


def test_the_examples_in_the_docs_run():
    result = doctest.testmod(strategies_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 5 and result.failed == 0
