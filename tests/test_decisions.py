"""Decisions: what ``check_decisions`` accepts (every draw of ``tilesparse.testing.decisions``)
and every way given decisions can be wrong (shape, dtype, device, missing or extra field,
out-of-range bucket or feature id), checked directly and through the API.

CPU only; the wrong device is the "meta" device, which needs no GPU.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.patterns import check_decisions
from tilesparse.testing import decisions, specs

B, H, T, D = 2, 3, 10, 16


def _buckets(spec):
    parts = getattr(getattr(spec, "rest", spec), "parts", (getattr(spec, "rest", spec),))
    return next((p.buckets for p in parts if isinstance(p, ts.Hash)), None), next(
        (p.k for p in parts if isinstance(p, ts.TopKFeatures)), None
    )


@settings(max_examples=50)
@given(data=st.data())
def test_every_drawn_decision_set_is_accepted(data):
    shape = data.draw(st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 40), st.sampled_from([8, 16])))
    k_len = data.draw(st.integers(shape[2], 48))  # keys at least as many as queries
    spec = data.draw(specs(heads=shape[1], max_k=shape[3]))
    dec = data.draw(decisions(spec, shape, k_len=k_len))
    buckets, k = _buckets(spec)
    check_decisions(
        dec, needed=spec.decision_fields, batch=shape[0], heads=shape[1], q_len=shape[2], k_len=k_len,
        head_dim=shape[3], device=torch.device("cpu"), buckets=buckets, support_k=k,
    )  # fmt: skip


def hash_dec(**over):
    g = torch.Generator().manual_seed(0)
    fields = {
        "q_bucket": torch.randint(0, 4, (B, H, T), generator=g, dtype=torch.int32),
        "k_bucket": torch.randint(0, 4, (B, H, T), generator=g, dtype=torch.int32),
    }
    fields.update(over)
    return ts.Decisions(**fields)


def check(dec, needed=frozenset({"q_bucket", "k_bucket"}), buckets=4, support_k=None, values=True):
    check_decisions(
        dec, needed=needed, batch=B, heads=H, q_len=T, k_len=T, head_dim=D, device=torch.device("cpu"),
        buckets=buckets, support_k=support_k, values=values,
    )  # fmt: skip


SUPPORT = frozenset({"q_support", "k_support"})


@pytest.mark.parametrize(
    "dec, kwargs, error, says",
    [
        ({"q_bucket": None}, {}, ValueError, "decisions is missing ['q_bucket'] that the spec needs"),
        (
            {"q_keep": torch.ones(B, H, T, dtype=torch.bool)},
            {},
            ValueError,
            "decisions has ['q_keep'] that the spec does not use",
        ),
        (
            {"q_bucket": torch.zeros(B, H, T + 1, dtype=torch.int32)},
            {},
            ValueError,
            "decisions.q_bucket must have shape (2, 3, 10) (B, H, Tq), H the query heads; got (2, 3, 11)",
        ),
        ({"k_bucket": torch.zeros(B, 1, T, dtype=torch.int32)}, {}, ValueError, "got (2, 1, 10)"),
        (
            {"k_bucket": torch.zeros(B, H, T)},
            {},
            TypeError,
            "decisions.k_bucket must be an integer tensor, got torch.float32",
        ),
        (
            {"k_bucket": torch.zeros(B, H, T, dtype=torch.bool)},
            {},
            TypeError,
            "must be an integer tensor, got torch.bool",
        ),
        (
            {"q_bucket": torch.full((B, H, T), 4)},
            {},
            ValueError,
            "decisions.q_bucket values must lie in [0, 4), got [4, 4]",
        ),
        ({"k_bucket": torch.full((B, H, T), -3)}, {}, ValueError, "values must lie in [0, 4), got [-3, -3]"),
        (
            {"q_bucket": torch.zeros(B, H, T, dtype=torch.int32, device="meta")},
            {},
            ValueError,
            "decisions.q_bucket is on meta, the inputs are on cpu",
        ),
        ({"q_bucket": [0] * T}, {}, TypeError, "decisions.q_bucket must be a torch.Tensor, got list"),
        (
            {"q_bucket": None, "k_bucket": None, "q_keep": torch.ones(B, H, T)},
            {"needed": frozenset({"q_keep", "k_keep"})},
            ValueError,
            "missing ['k_keep']",
        ),
        (
            {
                "q_bucket": None,
                "k_bucket": None,
                "q_keep": torch.ones(B, H, T),
                "k_keep": torch.ones(B, H, T, dtype=torch.bool),
            },
            {"needed": frozenset({"q_keep", "k_keep"})},
            TypeError,
            "decisions.q_keep must be torch.bool, got torch.float32",
        ),
        (
            {
                "q_bucket": None,
                "k_bucket": None,
                "q_support": torch.zeros(B, H, T, 3, dtype=torch.int64),
                "k_support": torch.tensor([0, 1]).expand(B, H, T, 2),
            },
            {"needed": SUPPORT, "support_k": 2},
            ValueError,
            "decisions.q_support must have shape (2, 3, 10, 2) (B, H, Tq, k)",
        ),
        (
            {
                "q_bucket": None,
                "k_bucket": None,
                "q_support": torch.zeros(B, H, T, 2, dtype=torch.int64),
                "k_support": torch.zeros(B, H, T, 2, dtype=torch.int64),
            },
            {"needed": SUPPORT, "support_k": 2},
            ValueError,
            "decisions.k_support repeats a feature id within a token's support",
        ),
        (
            {
                "q_bucket": None,
                "k_bucket": None,
                "q_support": torch.tensor([0, D]).expand(B, H, T, 2),
                "k_support": torch.tensor([0, 1]).expand(B, H, T, 2),
            },
            {"needed": SUPPORT, "support_k": 2},
            ValueError,
            "decisions.q_support values must lie in [0, 16), got [0, 16]",
        ),
    ],
)
def test_wrong_decisions_are_named(dec, kwargs, error, says):
    with pytest.raises(error) as info:
        check(hash_dec(**dec), **kwargs)
    assert says in str(info.value)


def test_values_false_skips_only_the_value_ranges():
    check(hash_dec(q_bucket=torch.full((B, H, T), 9)), values=False)
    with pytest.raises(TypeError):
        check(hash_dec(q_bucket=torch.full((B, H, T), 9.0)), values=False)


def test_not_a_decisions_object_is_refused():
    with pytest.raises(TypeError, match="decisions must be a tilesparse.Decisions, got dict"):
        check({"q_bucket": 0})


def test_wrong_decisions_through_the_api():
    q = torch.randn(B, H, T, D)
    attn = ts.compile(ts.Hash(buckets=4))
    with pytest.raises(ValueError, match=r"q_bucket values must lie in \[0, 4\)"):
        attn(q, q, q, decisions=hash_dec(q_bucket=torch.full((B, H, T), 7)))
    with pytest.raises(ValueError, match=r"decisions is missing \['k_bucket'\]"):
        attn.reference(q, q, q, decisions=hash_dec(k_bucket=None))
    with pytest.raises(ValueError, match="does not use"):
        attn.prepare(q, q, q, decisions=hash_dec(k_keep=torch.ones(B, H, T, dtype=torch.bool)))
    with pytest.raises(ValueError, match=r"must have shape \(2, 3, 10\)"):
        attn(q, q[:, :1], q[:, :1], decisions=hash_dec(q_bucket=torch.zeros(B, 1, T, dtype=torch.int32)))
    with pytest.raises(ValueError, match="reference needs decisions="):
        attn.reference(q, q, q)
    # validate=False skips the value read-back, not the structural checks
    lax = ts.compile(ts.Hash(buckets=4), validate=False)
    with pytest.raises(TypeError, match="integer tensor"):
        lax(q, q, q, decisions=hash_dec(q_bucket=torch.zeros(B, H, T)))


def test_merge_present_to_and_repr():
    keep = ts.Decisions(q_keep=torch.ones(1, 1, 3, dtype=torch.bool), k_keep=torch.ones(1, 1, 3, dtype=torch.bool))
    both = keep.merge(hash_dec())
    assert both.present() == {"q_keep", "k_keep", "q_bucket", "k_bucket"}
    with pytest.raises(ValueError, match=r"decisions set twice: \['q_keep'\]"):
        both.merge(ts.Decisions(q_keep=keep.q_keep))
    assert repr(keep) == "Decisions(q_keep=(1, 1, 3):bool, k_keep=(1, 1, 3):bool)"
    moved = both.to("meta")
    assert all(t.device.type == "meta" for _, t in moved.items() if t is not None)
    assert moved.q_support is None
