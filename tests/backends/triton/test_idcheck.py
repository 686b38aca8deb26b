"""The one-launch id check (backends/triton/idcheck.py) against the torch ops it stands in for
(patterns/decision_errors.py), under the interpreter; tests/gpu repeats it on the H200."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesparse.backends import range_check_for
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
    results = []
    for check in (None, idcheck.check_range_into):
        errors = DeviceErrors("op", rows, torch.device("cpu"), check)
        assert (errors.range_check is None) == (check is None)
        clamped, poison = check_on_device(dict(fields), rows, errors)
        results.append((clamped, poison, errors.record.clone()))
        if bad:
            with pytest.raises(ValueError, match=rf"decisions\.{bad[0]} values must lie in \[0, {bound}\)"):
                errors.check()
        else:
            errors.check()
    (c0, p0, r0), (c1, p1, r1) = results
    for n in fields:
        torch.testing.assert_close(c0[n], c1[n], rtol=0, atol=0)
    assert bool(p0.isnan()) == bool(p1.isnan()) == (bad is not None)
    assert r0.tolist() == r1.tolist()


def test_a_distinct_row_keeps_the_torch_ops():
    """A support's repeated-id check has no kernel: a record with such a row takes none."""
    rows = (Row("q_support", "range", 8), Row("q_support", "distinct", 1))
    assert DeviceErrors("op", rows, torch.device("cpu"), idcheck.check_range_into).range_check is None


def test_the_device_path_of_an_op_uses_the_kernel(monkeypatch):
    """A call whose given bucket ids are checked on the device goes through the kernel (counted)."""
    import tilesparse as ts

    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    calls = []
    real = idcheck.check_range_into
    monkeypatch.setattr(idcheck, "check_range_into", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    attn = ts.compile(ts.Hash(buckets=4), backend="triton")
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    dec = attn.decide(q, k)
    given_ = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())
    torch.testing.assert_close(attn(q, k, v, decisions=given_), attn.reference(q, k, v, decisions=dec))
    assert len(calls) == 2  # one launch per field
