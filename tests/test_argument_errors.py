"""Every malformed argument is a ValueError or TypeError that names the argument and what was
expected: at ``compile()`` for the options, at the call for tensors and decisions; specs take
their fields without coercion. And a backend that cannot run a spec says so in its reasons,
so the planner picks another and ``explain()`` shows why. CPU.
"""

import pydantic
import pytest
import torch

import tilesparse as ts

Q = torch.randn(1, 2, 70, 16)


def _call(attn, q=Q, k=Q, v=Q, **kw):
    return lambda: attn(q, k, v, **kw)


HASH4 = ts.compile(ts.Hash(buckets=4), backend="reference")
HASH4_NO_VALIDATE = ts.compile(ts.Hash(buckets=4), backend="reference", validate=False)
TOPK = ts.compile(ts.TopKFeatures(k=32), backend="reference")
_ints = lambda fill: torch.full((1, 2, 70), fill, dtype=torch.int64)  # noqa: E731

CASES = {
    "q, k, v on meta": (_call(HASH4, q=Q.to("meta"), k=Q.to("meta"), v=Q.to("meta")), ValueError, "on the meta device"),
    "k alone on meta": (_call(HASH4, k=Q.to("meta")), ValueError, "q, k, v must be on one device, got cpu, meta, cpu"),
    "q alone on meta": (_call(HASH4, q=Q.to("meta")), ValueError, "q, k, v must be on one device, got meta, cpu, cpu"),
    "q as a list": (_call(HASH4, q=Q.tolist()), TypeError, "q must be a torch.Tensor"),
    "v as None": (_call(HASH4, v=None), TypeError, "v must be a torch.Tensor"),
    "decisions as a dict": (
        _call(HASH4, decisions={"q_bucket": _ints(0), "k_bucket": _ints(0)}),
        TypeError, "decisions must be a tilesparse.Decisions",
    ),
    "negative id, validate=False": (
        _call(HASH4_NO_VALIDATE, decisions=ts.Decisions(q_bucket=_ints(-3), k_bucket=_ints(0))),
        ValueError, r"decisions.q_bucket values must lie in \[0, 4\)",
    ),
    "scale=inf": (lambda: ts.compile(ts.Dense(), scale=float("inf")), ValueError, "scale must be None or a finite number > 0"),
    "scale=nan": (lambda: ts.compile(ts.Dense(), scale=float("nan")), ValueError, "scale must be"),
    "scale=0": (lambda: ts.compile(ts.Dense(), scale=0), ValueError, "scale must be None or a finite number > 0, got 0"),
    "scale=True": (lambda: ts.compile(ts.Dense(), scale=True), ValueError, "scale must be None or a finite number > 0, got True"),
    "scale as a string": (lambda: ts.compile(ts.Dense(), scale="1"), ValueError, "scale must be"),
    "unknown backend": (lambda: ts.compile(ts.Dense(), backend="nonexistent"), ValueError, "backend must be 'auto' or a registered backend"),
    "validate='no'": (lambda: ts.compile(ts.Dense(), validate="no"), TypeError, "validate must be a bool"),
    "causal=1": (lambda: ts.compile(ts.Dense(), causal=1), TypeError, "causal must be a bool"),
    "plan() with k > D": (lambda: TOPK.plan(Q, Q, Q), ValueError, "TopKFeatures.k=32 exceeds the head dim D=16"),
    "Hash(buckets=True)": (lambda: ts.Hash(buckets=True), pydantic.ValidationError, "buckets"),
    "Hash(buckets=4.0)": (lambda: ts.Hash(buckets=4.0), pydantic.ValidationError, "buckets"),
    "Hash(buckets='4')": (lambda: ts.Hash(buckets="4"), pydantic.ValidationError, "buckets"),
    "attend_self='no'": (lambda: ts.Hash(attend_self="no"), pydantic.ValidationError, "attend_self"),
    "attend_self=1": (lambda: ts.Hash(attend_self=1), pydantic.ValidationError, "attend_self"),
    "keep=True": (lambda: ts.QKDrop(keep=True), pydantic.ValidationError, "keep"),
    "keep='0.5'": (lambda: ts.QKDrop(keep="0.5"), pydantic.ValidationError, "keep"),
    "TopKFeatures(k=True)": (lambda: ts.TopKFeatures(k=True), pydantic.ValidationError, "k"),
    "dense_heads=[True]": (lambda: ts.PerHead(dense_heads=[True], rest=ts.Hash()), pydantic.ValidationError, "dense_heads"),
    "criterion=1": (lambda: ts.Hash(criterion=1), pydantic.ValidationError, "criterion"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_a_clear_error(case):
    fn, exc, match = CASES[case]
    assert issubclass(exc, ValueError | TypeError)
    with pytest.raises(exc, match=match):
        fn()


def test_good_arguments_still_pass():
    assert ts.QKDrop(keep=1).keep == 1.0  # an int where a float is expected is fine
    assert ts.PerHead(dense_heads=[1, 0], rest=ts.Hash()).dense_heads == (0, 1)
    assert ts.parse_spec('{"kind": "hash", "buckets": 8, "attend_self": false}') == ts.Hash(buckets=8, attend_self=False)
    assert ts.compile(ts.Dense(), scale=2).scale == 2.0


def test_triton_refuses_a_bucket_count_its_index_build_cannot_sort_and_the_planner_picks_another():
    q = torch.randn(1, 2, 64, 16)
    attn = ts.compile(ts.Hash(buckets=65536))
    assert attn.plan(q, q, q).assignments[0].backend.NAME != "triton"
    assert "triton: buckets=65536 > 65535: the index build's counting sort handles at most 65535" in attn.explain(q, q, q)
    with pytest.raises(ts.NoBackendError, match="buckets=65536 > 65535"):
        ts.compile(ts.Hash(buckets=65536), backend="triton")(q, q, q)
    dec = attn.decide(q, q)
    torch.testing.assert_close(attn(q, q, q, decisions=dec), attn.reference(q, q, q, decisions=dec))
    assert ts.compile(ts.Hash(buckets=65535), backend="triton").plan(q, q, q).assignments[0].backend.NAME == "triton"


def test_a_misspelled_call_keyword_is_a_type_error_naming_the_call():
    """The op's call passes SDPA's keywords on (its signature lists them): a misspelled one is
    refused before anything runs, naming the call and the keywords it takes."""
    import inspect

    attn = ts.compile(ts.Hash(buckets=2), backend="reference")
    q = torch.randn(1, 1, 8, 8)
    wrong = r"CompiledAttention.__call__\(\) got unexpected keyword arguments \['is_casual'\]"
    with pytest.raises(TypeError, match=wrong):
        attn(q, q, q, is_casual=True)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments \['is_casual'\].*'is_causal'"):
        attn("not a tensor", q, q, is_casual=True)  # the keyword first, before the tensors are looked at
    params = inspect.signature(attn.__call__).parameters
    assert params["is_causal"].default is None and params["dropout_p"].default == 0.0 and "sdpa" not in params
    dec = attn.decide(q, q)
    torch.testing.assert_close(attn(q, q, q, decisions=dec, is_causal=True), attn(q, q, q, decisions=dec))
