"""Criteria: the built-ins' contracts, user criteria registered with ``@ts.criterion`` and used
in specs (reproducible with a torch.Generator), and every way a criterion can break its
contract (wrong shape, dtype, range, repeated feature ids, not a pair).

CPU only. User criteria are registered under ``test-`` names with ``replace=True`` so the
tests can rerun in one process.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.patterns import get_criterion
from tilesparse.testing import attention_inputs, decisions, specs


def inputs(B=1, H=2, Hkv=2, T=24, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(B, H, T, D, generator=g),
        torch.randn(B, Hkv, T, D, generator=g),
        torch.randn(B, Hkv, T, D, generator=g),
    )


@ts.criterion("test-norm-keep", produces="keep", replace=True)
def norm_keep(q, k, /, *, keep, generator=None):
    """Keep the tokens whose norm is above the (1 - keep) quantile of their head."""

    def side(x):
        n = x.norm(dim=-1)
        return n >= torch.quantile(n, 1 - keep, dim=-1, keepdim=True)

    return side(q), side(k)


@ts.criterion("test-sign-bucket", produces="bucket", replace=True)
def sign_bucket(q, k, /, *, buckets, generator=None):
    """Bucket by the sign pattern of the first features, folded into ``buckets``."""

    def side(x):
        bits = (x[..., :4] > 0).long() * torch.tensor([1, 2, 4, 8])
        return (bits.sum(-1) % buckets).to(torch.int32)

    return side(q), side(k)


@ts.criterion("test-random-support", produces="support", replace=True)
def random_support(q, k_, /, *, k, generator=None):
    """A random k-subset of the features per token: needs the generator to be reproducible."""

    def side(x):
        return torch.rand(x.shape, generator=generator).argsort(dim=-1)[..., :k]

    return side(q), side(k_)


@settings(max_examples=25)
@given(data=st.data())
def test_builtin_criteria_honour_their_contract(data):
    q, k, _ = data.draw(attention_inputs(seqlen=st.integers(1, 64), requires_grad=False))
    spec = data.draw(specs(heads=q.shape[1], max_k=q.shape[-1], allow_per_head=False))
    attn = ts.compile(spec, causal=True)
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    B, H, T, D = q.shape
    for name, t in dec.items():
        if t is None:
            continue
        kind = name.split("_")[1]
        if kind == "keep":
            assert t.dtype == torch.bool and t.shape == (B, H, T)
        elif kind == "bucket":
            hash_ = next(p for p in getattr(spec, "parts", (spec,)) if isinstance(p, ts.Hash))
            assert t.shape == (B, H, T) and 0 <= int(t.min()) and int(t.max()) < hash_.buckets
        else:
            top = next(p for p in getattr(spec, "parts", (spec,)) if isinstance(p, ts.TopKFeatures))
            assert t.shape == (B, H, T, top.k)
            assert bool((t[..., 1:] > t[..., :-1]).all()), "ids increase along the support"
            assert 0 <= int(t.min()) and int(t.max()) < D


def test_bernoulli_keeps_about_the_asked_fraction():
    q, k, _ = inputs(T=4096, H=1, Hkv=1)
    qk, kk = get_criterion("bernoulli")(q, k, keep=0.3, generator=torch.Generator().manual_seed(0))
    assert abs(qk.float().mean().item() - 0.3) < 0.03 and abs(kk.float().mean().item() - 0.3) < 0.03
    assert not torch.equal(qk, kk), "queries and keys are drawn independently"


@pytest.mark.parametrize("buckets", [1, 2, 5, 16])
def test_lsh_hashes_queries_and_keys_with_one_rotation(buckets):
    q, _, _ = inputs(T=200)
    qb, kb = get_criterion("lsh")(q, q.clone(), buckets=buckets, generator=torch.Generator().manual_seed(1))
    assert torch.equal(qb, kb), "the same vector must land in the same bucket on both sides"
    assert qb.dtype == torch.int32 and 0 <= int(qb.min()) and int(qb.max()) < buckets
    if buckets == 1:
        assert not bool(qb.any())
    else:
        assert len(qb.unique()) > 1


def test_lsh_puts_opposite_vectors_in_different_buckets():
    q, _, _ = inputs(T=64)
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    a, _ = get_criterion("lsh")(q, q, buckets=8, generator=g())
    b, _ = get_criterion("lsh")(-q, q, buckets=8, generator=g())
    assert not bool((a == b).any()), "argmax over [xR, -xR] maps -x to the opposite direction"


def test_topk_abs_takes_the_largest_magnitudes_and_the_lowest_id_on_ties():
    x = torch.tensor([0.5, -3.0, 2.0, 2.0, -2.0, 0.0, 1.0, 0.1]).view(1, 1, 1, 8)
    qs, _ = get_criterion("topk_abs")(x, x, k=3)
    assert qs.flatten().tolist() == [1, 2, 3]
    qs, _ = get_criterion("topk_abs")(x, x, k=4)
    assert qs.flatten().tolist() == [1, 2, 3, 4]


# ---------------------------------------------------------------------------------------------
# user criteria


@pytest.mark.parametrize(
    "spec",
    [
        ts.QKDrop(keep=0.5, criterion="test-norm-keep"),
        ts.Hash(buckets=5, criterion="test-sign-bucket"),
        ts.TopKFeatures(k=4, criterion="test-random-support"),
        ts.Hybrid(
            parts=[ts.Hash(buckets=3, criterion="test-sign-bucket"), ts.QKDrop(keep=0.6, criterion="test-norm-keep")]
        ),
    ],
    ids=str,
)
def test_a_user_criterion_drives_a_spec_reproducibly(spec):
    q, k, v = inputs(Hkv=1)
    assert ts.parse_spec(spec.model_dump_json()) == spec, "a spec naming a user criterion still round-trips"
    attn = ts.compile(spec, backend="executor")
    seeded = lambda: torch.Generator().manual_seed(7)  # noqa: E731
    d1, d2 = attn.decide(q, k, generator=seeded()), attn.decide(q, k, generator=seeded())
    for (name, a), (_, b) in zip(d1.items(), d2.items(), strict=True):
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b), f"{name} differs between two runs with one seed"
    out1 = attn(q, k, v, generator=seeded())
    out2 = attn(q, k, v, generator=seeded())
    assert torch.equal(out1, out2)
    assert torch.allclose(out1, attn.reference(q, k, v, decisions=d1), atol=1e-5)


def test_the_user_criterion_sees_keys_expanded_per_query_head():
    seen = {}

    @ts.criterion("test-spy", produces="keep", replace=True)
    def spy(q, k, /, *, keep, generator=None):
        seen["shapes"] = (tuple(q.shape), tuple(k.shape))
        return torch.ones(q.shape[:3], dtype=torch.bool), torch.ones(q.shape[:3], dtype=torch.bool)

    q, k, _ = inputs(H=4, Hkv=2, T=10)
    ts.compile(ts.QKDrop(criterion="test-spy")).decide(q, k)
    assert seen["shapes"] == ((1, 4, 10, 16), (1, 4, 10, 16))
    assert "test-spy" in ts.registered("keep") and "test-spy" not in ts.registered("bucket")


def test_a_random_user_criterion_differs_across_seeds():
    q, k, _ = inputs()
    attn = ts.compile(ts.TopKFeatures(k=4, criterion="test-random-support"))
    a = attn.decide(q, k, generator=torch.Generator().manual_seed(0)).q_support
    b = attn.decide(q, k, generator=torch.Generator().manual_seed(1)).q_support
    assert not torch.equal(a, b)


def _bad(produces, out):
    """A spec whose criterion returns ``out(q)``."""
    name = f"test-bad-{produces}"
    ts.criterion(name, produces=produces, replace=True)(lambda q, k, /, *, generator=None, **f: out(q))
    field = {"keep": "QKDrop(keep=0.5", "bucket": "Hash(buckets=4", "support": "TopKFeatures(k=2"}[produces]
    return ts.parse_spec(eval(f"ts.{field}, criterion=name)"))


@pytest.mark.parametrize(
    "produces, out, error, says",
    [
        ("keep", lambda q: torch.ones(q.shape[:3], dtype=torch.bool), TypeError, "must return a pair (q_side, k_side)"),
        ("keep", lambda q: (torch.ones(q.shape[:3], dtype=torch.bool),) * 3, TypeError, "must return a pair"),
        (
            "keep",
            lambda q: (torch.ones(q.shape[:2], dtype=torch.bool),) * 2,
            ValueError,
            "q_side must have shape (1, 2, 24)",
        ),
        ("keep", lambda q: (torch.ones(q.shape[:3]),) * 2, TypeError, "q_side must be torch.bool, got torch.float32"),
        (
            "keep",
            lambda q: (torch.ones(q.shape[:3], dtype=torch.bool), [True]),
            TypeError,
            "k_side must be a torch.Tensor",
        ),
        (
            "bucket",
            lambda q: (torch.zeros(q.shape[:3], dtype=torch.int32), torch.full(q.shape[:3], 4)),
            ValueError,
            "k_side values must lie in [0, 4), got [4, 4]",
        ),
        (
            "bucket",
            lambda q: (torch.full(q.shape[:3], -1), torch.zeros(q.shape[:3], dtype=torch.int64)),
            ValueError,
            "q_side values must lie in [0, 4)",
        ),
        (
            "bucket",
            lambda q: (torch.zeros(q.shape[:3]),) * 2,
            TypeError,
            "must be an integer tensor, got torch.float32",
        ),
        (
            "support",
            lambda q: (torch.zeros((*q.shape[:3], 3), dtype=torch.int64),) * 2,
            ValueError,
            "q_side must have shape (1, 2, 24, 2) (B, H, Tq, k)",
        ),
        (
            "support",
            lambda q: (torch.zeros((*q.shape[:3], 2), dtype=torch.int64),) * 2,
            ValueError,
            "repeats a feature id",
        ),
        (
            "support",
            lambda q: (torch.full((*q.shape[:3], 2), 16).cumsum(-1),) * 2,
            ValueError,
            "values must lie in [0, 16)",
        ),
    ],
)
def test_a_criterion_breaking_its_contract_is_named(produces, out, error, says):
    spec = _bad(produces, out)
    q, k, v = inputs()
    attn = ts.compile(spec)
    with pytest.raises(error) as info:
        attn.decide(q, k)
    assert says in str(info.value) and f"criterion 'test-bad-{produces}' (produces '{produces}')" in str(info.value)
    with pytest.raises(error, match="test-bad"):
        attn(q, k, v)


@pytest.mark.parametrize(
    "call, error, says",
    [
        (lambda: ts.criterion("", produces="keep"), ValueError, "non-empty string"),
        (
            lambda: ts.criterion("test-x", produces="mask"),
            ValueError,
            "produces must be one of ('keep', 'bucket', 'support'), got 'mask'",
        ),
        (lambda: ts.criterion("test-x", produces="keep")(3), TypeError, "must decorate a callable, got int"),
        (
            lambda: ts.criterion("bernoulli", produces="keep")(lambda q, k, /, **f: None),
            ValueError,
            "'bernoulli' is already registered (produces 'keep'); pick another name or pass replace=True",
        ),
        (lambda: get_criterion("test-never"), KeyError, "unknown criterion 'test-never'; registered: ["),
    ],
)
def test_registration_errors_say_what_to_do(call, error, says):
    with pytest.raises(error) as info:
        call()
    assert says in str(info.value)


@settings(max_examples=25)
@given(data=st.data())
def test_decisions_given_override_the_criterion(data):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 48), dtype=torch.float32, requires_grad=False))
    spec = ts.QKDrop(keep=0.5, criterion="test-norm-keep")
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, backend="executor")
    assert torch.allclose(attn(q, k, v, decisions=dec), attn.reference(q, k, v, decisions=dec), atol=1e-5)
