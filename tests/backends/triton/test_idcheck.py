"""The one-launch id checks (backends/triton/idcheck.py: a field's range; a feature support's
range and repeats) against the torch ops they stand in for (patterns/decision_errors.py), under
the interpreter; tests/gpu repeats them on the H200."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends import range_check_for, support_check_for
from tilesparse.backends.triton import idcheck
from tilesparse.patterns import decision_errors
from tilesparse.patterns.decision_errors import DeviceErrors, Row, check_on_device

_I64 = torch.iinfo(torch.int64)


def _ids(shape, dtype, lo, hi, seed, view):
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dtype)
    if view == "transposed" and len(shape) >= 2:
        return base.transpose(-1, -2).contiguous().transpose(-1, -2)  # same values, column-major strides
    if view == "sliced":
        return torch.cat([base, base], dim=-1)[..., : shape[-1]]  # a strided view of a wider tensor
    return base


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=4).filter(lambda s: math.prod(s) <= 5000),
    dtype=st.sampled_from([torch.int32, torch.int64, torch.int16, torch.uint8]),
    bound=st.integers(1, 300),
    lo=st.integers(-5, 250),
    span=st.integers(0, 400),
    view=st.sampled_from(["contiguous", "transposed", "sliced"]),
    first=st.booleans(),
    before=st.sampled_from([1.0, float("nan")]),
    seed=st.integers(0, 2**16),
)
def test_the_kernel_clamps_folds_and_poisons_as_the_torch_ops(shape, dtype, bound, lo, span, view, first, before, seed):
    """Clamped ids, the record's fold, the poison (set by the first field, kept NaN by a later
    one) and the scratch row left reset, for any shape up to 4-D, strides, integer dtypes, and
    sizes over several programs (T not a multiple of the block)."""
    if dtype == torch.uint8:
        lo = max(lo, 0)
    hi = min(lo + span, 255 if dtype == torch.uint8 else 10**6)
    ids = _ids(tuple(shape), dtype, lo, hi, seed, view)
    record = torch.tensor([3, 7], dtype=torch.int64)  # what earlier calls left
    scratch = torch.tensor([_I64.max, _I64.min, 0], dtype=torch.int64)
    poison = torch.tensor(before, dtype=torch.float32)
    out = idcheck.check_range_into(ids, bound, record, scratch, poison, first=first)
    assert out.dtype == ids.dtype and out.is_contiguous()
    torch.testing.assert_close(out, ids.long().clamp(0, bound - 1).to(dtype), rtol=0, atol=0)
    got_lo, got_hi = int(ids.min()), int(ids.max())
    assert record.tolist() == [min(3, got_lo), max(7, got_hi)]
    assert scratch.tolist() == [_I64.max, _I64.min, 0]  # the last program reset it for the next call
    bad = got_lo < 0 or got_hi >= bound
    assert bool(poison.isnan()) == (bad or (not first and math.isnan(before)))
    if not poison.isnan():
        assert float(poison) == 1.0


def test_the_kernel_refuses_what_it_cannot_check():
    ids = torch.zeros(4, dtype=torch.int32)
    rec, scr, poi = torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), torch.zeros(())
    with pytest.raises(ValueError, match="ids must be a non-empty tensor of 1 to 4 dims"):
        idcheck.check_range_into(torch.zeros(1, 1, 1, 1, 2, dtype=torch.int32), 4, rec, scr, poi, first=True)
    with pytest.raises(ValueError, match="ids must be a non-empty tensor"):
        idcheck.check_range_into(torch.zeros(0, dtype=torch.int32), 4, rec, scr, poi, first=True)
    with pytest.raises(ValueError, match="bound must be >= 1"):
        idcheck.check_range_into(ids, 0, rec, scr, poi, first=True)
    with pytest.raises(ValueError, match="scratch_row must be 3 contiguous torch.int64"):
        idcheck.check_range_into(ids, 4, rec, scr.int(), poi, first=True)
    with pytest.raises(ValueError, match="poison must be 1 contiguous torch.float32"):
        idcheck.check_range_into(ids, 4, rec, scr, poi.double(), first=True)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
@pytest.mark.parametrize("bad", [None, ("q_bucket", 9), ("k_bucket", -2)])
def test_check_on_device_gives_the_same_through_the_kernel_and_the_torch_ops(bad, dtype):
    """One field or the other out of range, or none: the same clamped fields, poison and
    recorded error through both ways (the op's device path takes the kernel where Triton runs)."""
    assert range_check_for(torch.device("cpu")) is idcheck.check_range_into  # the interpreter counts here
    g = torch.Generator().manual_seed(0)
    fields = {n: torch.randint(0, 4, (2, 3, 50), generator=g, dtype=dtype) for n in ("q_bucket", "k_bucket")}
    if bad and not (dtype == torch.uint8 and bad[1] < 0):
        fields[bad[0]][1, 2, 33] = bad[1]
    else:
        bad = None
    # 300 buckets: past uint8's range, which the torch ops' clamp must not overflow
    bound = 300 if dtype == torch.uint8 and bad is None else 4
    rows = (Row("q_bucket", "range", bound), Row("k_bucket", "range", bound))
    error = rf"decisions\.{bad[0]} values must lie in \[0, {bound}\)" if bad else None
    assert _same_both_ways(fields, rows, (idcheck.check_range_into,), error) == (bad is not None)


def _same_both_ways(fields: dict, rows: tuple, kernels: tuple, error: str | None) -> bool:
    """check_on_device on ``fields`` through the torch ops and through ``kernels`` (the range
    check, and the support check if given): the same clamped fields, poison and record, and
    ``error`` (a message pattern, or None: no error) raised by both; whether the poison is NaN."""
    results = []
    for checks in ((None,) * len(kernels), kernels):
        errors = DeviceErrors("op", rows, torch.device("cpu"), *checks)
        assert (errors.range_check is None) == (checks[0] is None)
        clamped, poison = check_on_device({n: t.clone() for n, t in fields.items()}, rows, errors)
        results.append((clamped, poison, errors.record.clone()))
        if error:
            with pytest.raises(ValueError, match=error):
                errors.check()
        else:
            errors.check()
    (c0, p0, r0), (c1, p1, r1) = results
    for n in fields:
        torch.testing.assert_close(c0[n], c1[n], rtol=0, atol=0)
    assert bool(p0.isnan()) == bool(p1.isnan())
    assert r0.tolist() == r1.tolist()
    return bool(p1.isnan())


def _support(shape, dtype, bound, seed, repeat, out_of_range, view):
    """Supports of distinct ids in [0, bound) per token (bound >= k), with one token made to
    repeat an id and/or one id put out of range."""
    g = torch.Generator().manual_seed(seed)
    *lead, k = shape
    ids = torch.stack([torch.randperm(bound, generator=g)[:k] for _ in range(math.prod(lead))]).view(shape)
    flat = ids.view(-1, k)
    if repeat is not None:
        tok, a, b = repeat
        t, a, b = tok % flat.shape[0], a % k, b % k
        if a == b:
            b = (a + 1) % k
        flat[t, b] = flat[t, a]
    if out_of_range is not None:
        tok, j, value = out_of_range
        flat[tok % flat.shape[0], j % k] = value
    ids = ids.to(dtype)
    if view == "transposed" and ids.dim() >= 2:
        return ids.transpose(-1, -2).contiguous().transpose(-1, -2)
    if view == "sliced":
        return torch.cat([ids, ids], dim=-1)[..., :k]
    return ids


def _torch_support_check(ids, bound):
    """What the torch ops of check_on_device make of one support: the clamped ids, the range
    row's [min, max], the repeat flag."""
    clamped = ids.long().clamp(0, bound - 1)
    s = clamped.sort(dim=-1).values
    return clamped.to(ids.dtype), (int(ids.min()), int(ids.max())), int((s[..., 1:] == s[..., :-1]).any())


@settings(max_examples=40, deadline=None)
@given(
    lead=st.lists(st.integers(1, 9), min_size=0, max_size=3),
    k=st.integers(2, idcheck.MAX_SUPPORT),
    extra=st.integers(0, 40),
    dtype=st.sampled_from([torch.int32, torch.int64, torch.int16, torch.uint8]),
    repeat=st.one_of(st.none(), st.tuples(st.integers(0, 10**4), st.integers(0, 63), st.integers(0, 63))),
    out_of_range=st.one_of(
        st.none(), st.tuples(st.integers(0, 10**4), st.integers(0, 63), st.sampled_from([-3, -1, 200]))
    ),
    view=st.sampled_from(["contiguous", "transposed", "sliced"]),
    first=st.booleans(),
    before=st.sampled_from([1.0, float("nan")]),
    seed=st.integers(0, 2**16),
)
def test_the_support_kernel_clamps_folds_and_poisons_as_the_torch_ops(
    lead, k, extra, dtype, repeat, out_of_range, view, first, before, seed
):
    """A support's clamped ids, its range row's and repeat row's fold, the poison and both
    scratch rows left reset, for 1-D to 4-D supports of 2 to MAX_SUPPORT ids per token (tokens
    over several programs), strides and integer dtypes; a repeat or an out-of-range id in any
    token is seen."""
    bound = k + extra
    if dtype == torch.uint8 and out_of_range is not None and out_of_range[2] < 0:
        out_of_range = None
    if dtype == torch.uint8:
        bound = min(bound, 200)
    ids = _support((*lead, k), dtype, bound, seed, repeat, out_of_range, view)
    record, repeat_row = torch.tensor([3, 7], dtype=torch.int64), torch.tensor([_I64.max, _I64.min], dtype=torch.int64)
    scratch, repeat_scratch = (torch.tensor([_I64.max, _I64.min, 0], dtype=torch.int64) for _ in range(2))
    poison = torch.tensor(before, dtype=torch.float32)
    out = idcheck.check_support_into(ids, bound, record, scratch, repeat_row, repeat_scratch, poison, first=first)
    clamped, (lo, hi), repeats = _torch_support_check(ids, bound)
    assert out.dtype == ids.dtype and out.is_contiguous()
    torch.testing.assert_close(out, clamped, rtol=0, atol=0)
    assert record.tolist() == [min(3, lo), max(7, hi)]
    assert repeat_row.tolist() == [repeats, repeats]
    if repeat is not None and out_of_range is None:
        assert repeats == 1  # the generator made one
    assert scratch.tolist() == repeat_scratch.tolist() == [_I64.max, _I64.min, 0]
    bad = lo < 0 or hi >= bound or repeats
    assert bool(poison.isnan()) == bool(bad or (not first and math.isnan(before)))
    if not poison.isnan():
        assert float(poison) == 1.0


def test_the_support_kernel_refuses_what_it_cannot_check():
    rows = [torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64)] * 2
    poison = torch.zeros(())
    with pytest.raises(ValueError, match=rf"a support's last dim must hold 2 to {idcheck.MAX_SUPPORT} ids, got 1"):
        idcheck.check_support_into(torch.zeros(2, 3, 1, dtype=torch.int32), 4, *rows, poison, first=True)
    wide = idcheck.MAX_SUPPORT + 1
    with pytest.raises(ValueError, match=rf"got {wide}"):
        idcheck.check_support_into(torch.zeros(2, wide, dtype=torch.int32), 4 * wide, *rows, poison, first=True)
    with pytest.raises(ValueError, match="repeat_scratch must be 3 contiguous torch.int64"):
        idcheck.check_support_into(torch.zeros(2, 4, dtype=torch.int32), 8, *rows[:3], rows[0], poison, first=True)


@pytest.mark.parametrize("bad", [None, "repeat", ("q_support", 9), ("k_support", -2)])
def test_check_on_device_gives_the_same_for_supports_through_the_kernels_and_the_torch_ops(bad):
    """A TopKFeatures pair of supports (the kernels: one launch per field, both rows in it) and
    the torch ops: the same clamped fields, poison and record, and the same error raised."""
    assert support_check_for(torch.device("cpu")) is idcheck.SUPPORT_CHECK
    g = torch.Generator().manual_seed(1)
    fields = {n: torch.stack([torch.randperm(8, generator=g)[:4] for _ in range(2 * 3 * 20)]).view(2, 3, 20, 4)
              for n in ("q_support", "k_support")}  # fmt: skip
    if bad == "repeat":
        fields["k_support"][1, 2, 7, 3] = fields["k_support"][1, 2, 7, 0]
    elif bad:
        fields[bad[0]][0, 1, 13, 2] = bad[1]
    rows = decision_errors.rows_for(ts.Decisions(**fields), buckets=None, head_dim=8)
    assert [(r.kind, r.width) for r in rows] == [("range", 0), ("distinct", 4)] * 2
    error = None
    if bad == "repeat":
        error = r"decisions\.k_support repeats a feature id"
    elif bad:
        error = rf"decisions\.{bad[0]} values must lie in \[0, 8\)"
    kernels = (idcheck.check_range_into, idcheck.SUPPORT_CHECK)
    assert _same_both_ways(fields, rows, kernels, error) == (bad is not None)


def test_a_support_wider_than_the_kernel_keeps_the_torch_ops():
    """No kernels for a record whose support is too wide for the repeat kernel, or where no
    support check is given: the torch ops check every row of such a call."""
    narrow = (Row("q_support", "range", 8), Row("q_support", "distinct", 1, 4))
    wide = (Row("q_support", "range", 256), Row("q_support", "distinct", 1, idcheck.MAX_SUPPORT + 1))
    cpu = torch.device("cpu")
    assert DeviceErrors("op", narrow, cpu, idcheck.check_range_into, idcheck.SUPPORT_CHECK).range_check is not None
    assert DeviceErrors("op", narrow, cpu, idcheck.check_range_into).range_check is None
    assert DeviceErrors("op", wide, cpu, idcheck.check_range_into, idcheck.SUPPORT_CHECK).range_check is None


@pytest.mark.parametrize(
    "spec,kernel", [(ts.Hash(buckets=4), "check_range_into"), (ts.TopKFeatures(k=4), "check_support_into")], ids=str
)
def test_the_device_path_of_an_op_uses_the_kernel(spec, kernel, monkeypatch):
    """A call whose given ids (buckets; feature supports) are checked on the device goes
    through the kernel, one launch per field (counted), and equals the reference."""
    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    calls = []
    real = getattr(idcheck, kernel)
    monkeypatch.setattr(idcheck, kernel, lambda *a, **kw: calls.append(1) or real(*a, **kw))
    attn = ts.compile(spec, backend="triton")
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    dec = attn.decide(q, k)
    given_ = ts.Decisions(**{n: t.clone() for n, t in dec.items() if t is not None})
    torch.testing.assert_close(attn(q, k, v, decisions=given_), attn.reference(q, k, v, decisions=dec))
    assert len(calls) == 2
