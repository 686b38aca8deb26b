"""A fuzz test of the public API: one malformed argument at a time (a spec field, a compile
option, q, k or v, a decision tensor, a call keyword), the others valid. Every failure is a
ValueError or TypeError (pydantic's ValidationError is a ValueError) whose message names the
argument; never another exception, a crash or a NaN. A call that succeeds returns finite
values of q's shape. CPU, reference and executor backends (fast).
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts

B, H, T, D = 1, 2, 24, 16
GOOD_SPECS = [ts.Dense(), ts.QKDrop(keep=0.5), ts.Hash(buckets=4), ts.TopKFeatures(k=4),
              ts.Hybrid(parts=[ts.Hash(buckets=2), ts.QKDrop(keep=0.7)]),
              ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=3))]  # fmt: skip

# (argument, bad value, words one of which the message must hold)
BAD_SPEC_FIELDS = [
    ("buckets", {"kind": "hash", "buckets": v}, ("buckets",)) for v in (0, -1, 65537, True, 2.5, "4", None)
] + [
    ("keep", {"kind": "qk_drop", "keep": v}, ("keep",)) for v in (0, 1.5, -0.1, math.nan, math.inf, True, "0.5")
] + [
    ("k", {"kind": "topk_features", "k": v}, ("k",)) for v in (0, 257, False, 1.0)
] + [
    ("attend_self", {"kind": "hash", "attend_self": v}, ("attend_self",)) for v in ("no", 1, None)
] + [
    ("criterion", {"kind": "hash", "criterion": v}, ("criterion",)) for v in ("nope", 3, "bernoulli")
] + [
    ("kind", v, ("kind", "tag", "discriminator")) for v in ({"kind": "nope"}, {}, {"buckets": 4})
] + [
    ("parts", {"kind": "hybrid", "parts": v}, ("parts",)) for v in ([], [{"kind": "hash"}, {"kind": "hash"}], [{"kind": "dense"}])
] + [
    ("dense_heads", {"kind": "per_head", "dense_heads": v, "rest": {"kind": "hash"}}, ("dense_heads",))
    for v in ([-1], [0, 0], [True], "0")
] + [
    ("extra", {"kind": "hash", "bucket": 4}, ("bucket",)),
]  # fmt: skip
BAD_OPTIONS = [("causal", v) for v in (1, None, "yes")] + [("scale", v) for v in (0, -1.0, math.inf, math.nan, True, "1")] + [
    ("backend", v) for v in ("nope", 3, None)
] + [("validate", v) for v in ("no", 1, None)]  # fmt: skip


def _tensor(seed=0, shape=(B, H, T, D)):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


BAD_TENSORS = [
    ("list", lambda t: t.tolist(), ()), ("None", lambda t: None, ()), ("3-D", lambda t: t[0], ()),
    ("int", lambda t: t.to(torch.int32), ()), ("float64", lambda t: t.double(), ()),
    ("meta", lambda t: t.to("meta"), ()), ("D=12", lambda t: t[..., :12], ()),
    ("T+1", lambda t: torch.cat([t, t[:, :, :1]], 2), ()),  # queries may be shorter than keys, not longer ("heads=3", lambda t: torch.cat([t, t[:, :1]], 1), ()),
    ("empty batch", lambda t: t[:0], ()),
]  # fmt: skip


def _bad_decision(kind: str, t: torch.Tensor) -> object:
    if kind == "out of range":
        return t.clone().fill_(10_000) if t.dtype != torch.bool else t.to(torch.int64)
    if kind == "negative":
        return t.clone().fill_(-1) if t.dtype != torch.bool else t.float()
    if kind == "float":
        return t.float()
    if kind == "shape":
        return t[..., :-1]
    if kind == "list":
        return t.tolist()
    return t.to("meta")


def _must_raise(fn, words) -> None:
    """fn() raises a ValueError or TypeError naming one of ``words``; anything else propagates."""
    try:
        fn()
    except (ValueError, TypeError) as err:
        assert any(w in str(err) for w in words), f"no word of {words} in: {type(err).__name__}: {err}"
        return
    pytest.fail(f"accepted; expected an error naming one of {words}")


@settings(max_examples=60)
@given(
    target=st.sampled_from(["spec", "option", "tensor", "decision", "decisions", "generator"]),
    spec=st.sampled_from(GOOD_SPECS),
    backend=st.sampled_from(["reference", "executor"]),
    bad_spec=st.sampled_from(BAD_SPEC_FIELDS),
    bad_option=st.sampled_from(BAD_OPTIONS),
    bad_tensor=st.sampled_from(BAD_TENSORS),
    which=st.sampled_from("qkv"),
    bad_dec=st.sampled_from(["out of range", "negative", "float", "shape", "list", "meta"]),
    field_index=st.integers(0, 5),
    validate=st.booleans(),
    junk_decisions=st.sampled_from([{}, (), "dec", 1]),
)
def test_one_malformed_argument_is_a_named_value_or_type_error(
    target, spec, backend, bad_spec, bad_option, bad_tensor, which, bad_dec, field_index, validate, junk_decisions
):
    q, k, v = _tensor(0), _tensor(1), _tensor(2)
    options = {"backend": backend, "validate": validate}
    if target == "spec":
        _, data, words = bad_spec
        _must_raise(lambda: ts.compile(data, **options), words)
        return
    if target == "option":
        name, value = bad_option
        _must_raise(lambda: ts.compile(spec, **{**options, name: value}), (name,))
        return
    attn = ts.compile(spec, **options)
    if target == "tensor":
        qkv = {"q": q, "k": k, "v": v}
        qkv[which] = bad_tensor[1](qkv[which])
        _must_raise(lambda: attn(qkv["q"], qkv["k"], qkv["v"]), (which,))
    elif target == "decision" and spec.decision_fields:
        dec = attn.decide(q, k)
        name = sorted(n for n, t in dec.items() if t is not None)[field_index % len(spec.decision_fields)]
        object.__setattr__(dec, name, _bad_decision(bad_dec, getattr(dec, name)))
        _must_raise(lambda: attn(q, k, v, decisions=dec), (f"decisions.{name}",))
    elif target == "decisions":
        _must_raise(lambda: attn(q, k, v, decisions=junk_decisions), ("decisions",))
    elif target == "generator":
        _must_raise(lambda: attn(q, k, v, generator="seed"), ("generator",))
    else:  # nothing malformed: a finite output of q's shape
        out = attn(q, k, v)
        assert out.shape == q.shape and torch.isfinite(out).all()
