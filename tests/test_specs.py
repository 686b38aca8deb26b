"""Specs: the JSON round trip of every kind, each spec's mask function against its definition
written out as a Python loop per element, and every validation error naming its field and range.

Property tests draw specs and decisions from ``tilesparse.testing``; CPU only, T <= 12 for the
element loops.
"""

import json

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import tilesparse as ts
from tilesparse.testing import decisions, specs


def kept_by_table(spec, dec, b, h, i, j) -> bool:
    """Element (i, j) of (b, h) under ``spec``, as each spec defines it (causality aside)."""
    if isinstance(spec, ts.PerHead):
        return h in spec.dense_heads or kept_by_table(spec.rest, dec, b, h, i, j)
    if isinstance(spec, ts.Hybrid):
        return all(kept_by_table(p, dec, b, h, i, j) for p in spec.parts)
    if isinstance(spec, ts.QKDrop):
        return bool(dec.q_keep[b, h, i]) and bool(dec.k_keep[b, h, j])
    if isinstance(spec, ts.Hash):
        return int(dec.q_bucket[b, h, i]) == int(dec.k_bucket[b, h, j]) and (spec.attend_self or i != j)
    return True  # Dense and TopKFeatures keep every element; TopK changes the score


@settings(max_examples=60)
@given(spec=specs(heads=4))
def test_json_round_trip_is_exact(spec):
    text = spec.model_dump_json()
    back = ts.parse_spec(text)
    assert back == spec and type(back) is type(spec)
    assert back.model_dump_json() == text
    assert ts.parse_spec(json.loads(text)) == spec
    assert str(back) == str(spec)
    assert hash(back) == hash(spec)


@settings(max_examples=40)
@given(data=st.data(), B=st.integers(1, 2), H=st.integers(1, 3), T=st.integers(1, 12))
def test_mask_mod_matches_the_table(data, B, H, T):
    spec = data.draw(specs(heads=H))
    dec = data.draw(decisions(spec, (B, H, T, 8)))
    mod = spec.mask_mod(dec)
    b, h, i, j = (torch.arange(n).view([-1 if d == a else 1 for d in range(4)]) for a, n in enumerate((B, H, T, T)))
    got = torch.ones(B, H, T, T, dtype=torch.bool) if mod is None else mod(b, h, i, j).expand(B, H, T, T)
    want = torch.tensor(
        [
            [[[kept_by_table(spec, dec, bb, hh, ii, jj) for jj in range(T)] for ii in range(T)] for hh in range(H)]
            for bb in range(B)
        ]
    ).view(B, H, T, T)
    assert torch.equal(got, want)


@settings(max_examples=30)
@given(data=st.data())
def test_decision_fields_and_supports_follow_the_parts(data):
    spec = data.draw(specs(heads=2))
    dec = data.draw(decisions(spec, (1, 2, 5, 8)))
    rest = spec.rest if isinstance(spec, ts.PerHead) else spec
    parts = rest.parts if isinstance(rest, ts.Hybrid) else (rest,)
    fields = {"qk_drop": "keep", "hash": "bucket", "topk_features": "support"}
    want = {f"{side}_{fields[p.kind]}" for p in parts if p.kind in fields for side in "qk"}
    assert spec.decision_fields == want == dec.present()
    sup = spec.supports(dec)
    assert (sup is not None) == any(p.kind == "topk_features" for p in parts)
    if sup is not None:
        assert sup[0] is dec.q_support and sup[1] is dec.k_support


@pytest.mark.parametrize(
    "make, field, says",
    [
        (lambda: ts.QKDrop(keep=0.0), "keep", r"keep must be in (0, 1]"),
        (lambda: ts.QKDrop(keep=1.5), "keep", r"keep must be in (0, 1]"),
        (lambda: ts.QKDrop(keep=-0.2), "keep", r"got -0.2"),
        (lambda: ts.Hash(buckets=0), "buckets", r"buckets must be in [1, 65536], got 0"),
        (lambda: ts.Hash(buckets=65537), "buckets", r"buckets must be in [1, 65536], got 65537"),
        (lambda: ts.TopKFeatures(k=0), "k", r"k must be in [1, 256]"),
        (lambda: ts.TopKFeatures(k=300), "k", r"got 300"),
        (lambda: ts.Hybrid(parts=[]), "parts", "at least one of QKDrop, Hash, TopKFeatures"),
        (lambda: ts.Hybrid(parts=[ts.Hash(), ts.Hash(buckets=2)]), "parts", "at most one part of each kind; ['hash']"),
        (lambda: ts.Hybrid(parts=[ts.Dense()]), "parts", "qk_drop"),
        (lambda: ts.PerHead(dense_heads=[-1], rest=ts.Dense()), "dense_heads", "head indices >= 0, got [-1]"),
        (lambda: ts.PerHead(dense_heads=[1, 1], rest=ts.Dense()), "dense_heads", "must not repeat a head; [1]"),
        (lambda: ts.PerHead(dense_heads=[0], rest=ts.PerHead(dense_heads=[], rest=ts.Dense())), "rest", "per_head"),
        (lambda: ts.QKDrop(criterion="lsh"), "criterion", "produces 'bucket' but QKDrop needs one producing 'keep'"),
        (lambda: ts.Hash(criterion="no-such"), "criterion", "unknown criterion 'no-such'; registered:"),
        (lambda: ts.Dense(window=4), "window", "Extra inputs are not permitted"),
        (lambda: ts.parse_spec({"kind": "sliding"}), "kind", "sliding"),
        (lambda: ts.parse_spec('{"kind": "hash", "buckets": "many"}'), "buckets", "integer"),
    ],
)
def test_invalid_values_name_the_field_and_range(make, field, says):
    with pytest.raises(ValidationError) as info:
        make()
    text = str(info.value)
    assert field in text and says in text, text


def test_specs_are_frozen_and_print_their_non_default_fields():
    spec = ts.Hash(buckets=4)
    with pytest.raises(ValidationError, match="frozen"):
        spec.buckets = 8
    assert str(ts.Hash()) == "Hash()"
    assert str(spec) == "Hash(buckets=4)"
    hy = ts.PerHead(dense_heads=[2, 0], rest=ts.Hybrid(parts=[ts.QKDrop(keep=0.5), ts.Hash(attend_self=False)]))
    assert str(hy) == "PerHead(dense_heads=[0, 2], rest=Hybrid(parts=[QKDrop(keep=0.5), Hash(attend_self=False)]))"
    assert hy.dense_heads == (0, 2)


def test_dense_heads_mask_checks_the_head_count():
    spec = ts.PerHead(dense_heads=[0, 3], rest=ts.Hash())
    assert spec.dense_heads_mask(4).tolist() == [True, False, False, True]
    with pytest.raises(ValueError, match=r"dense_heads \[3\] out of range for 3 query heads"):
        spec.dense_heads_mask(3)
    assert ts.Hash().dense_heads_mask(4) is None


def test_parse_spec_accepts_a_spec_dict_or_json_and_nothing_else():
    spec = ts.Hybrid(parts=[ts.TopKFeatures(k=4), ts.QKDrop(keep=0.25)])
    assert ts.parse_spec(spec) is spec
    assert ts.parse_spec(spec.model_dump()) == spec
    assert ts.parse_spec(spec.model_dump_json().encode()) == spec
    with pytest.raises(ValidationError):
        ts.parse_spec({"buckets": 4})  # no kind: the discriminator is required
