"""The one-launch id check (backends/triton/idcheck.py: every field's range, a feature
support's repeats, two fields a launch) against the torch ops it stands in for
(patterns/decision_errors.py), under the interpreter; tests/gpu repeats it on the H200."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends import id_check_for
from tilesparse.backends.triton import idcheck
from tilesparse.backends.triton import launch as L
from tilesparse.patterns import decision_errors
from tilesparse.patterns.decision_errors import DeviceErrors, IdField, Row, check_on_device

_I64 = torch.iinfo(torch.int64)
_RESET = [_I64.max, _I64.min, 0]


def _ids(shape, dtype, lo, hi, seed, view):
    g = torch.Generator().manual_seed(seed)
    base = torch.randint(lo, hi + 1, shape, generator=g, dtype=torch.int64).to(dtype)
    return _viewed(base, view)


def _viewed(ids, view):
    """``ids`` with the same values and other strides: column-major, or a slice of a wider tensor."""
    if view == "transposed" and ids.dim() >= 2:
        return ids.transpose(-1, -2).contiguous().transpose(-1, -2)
    if view == "sliced":
        return torch.cat([ids, ids], dim=-1)[..., : ids.shape[-1]]
    return ids


_DTYPES = st.sampled_from([torch.int32, torch.int64, torch.int16, torch.uint8])
_VIEWS = st.sampled_from(["contiguous", "transposed", "sliced"])


@st.composite
def _range_field(draw):
    """Ids of any shape up to 4-D (several programs: not a multiple of the block), any integer
    dtype, some out of range; and their bound."""
    shape = draw(st.lists(st.integers(1, 40), min_size=1, max_size=4).filter(lambda s: math.prod(s) <= 5000))
    dtype = draw(_DTYPES)
    lo = draw(st.integers(0 if dtype == torch.uint8 else -5, 250))
    hi = min(lo + draw(st.integers(0, 400)), 255 if dtype == torch.uint8 else 10**6)
    ids = _ids(tuple(shape), dtype, lo, hi, draw(st.integers(0, 2**16)), draw(_VIEWS))
    return ids, draw(st.integers(1, 300)), False


@st.composite
def _support_field(draw):
    """A 1-D to 4-D support of 2 to MAX_SUPPORT ids a token, distinct unless a token is made to
    repeat one, maybe with an id out of range; and its bound."""
    k = draw(st.integers(2, idcheck.MAX_SUPPORT))
    dtype = draw(_DTYPES)
    bound = k + draw(st.integers(0, 40))
    if dtype == torch.uint8:
        bound = min(bound, 200)
    repeat = draw(st.one_of(st.none(), st.tuples(st.integers(0, 10**4), st.integers(0, 63), st.integers(0, 63))))
    values = [200] if dtype == torch.uint8 else [-3, -1, 200]
    out_of_range = draw(st.one_of(st.none(), st.tuples(st.integers(0, 10**4), st.integers(0, 63), st.sampled_from(values))))
    lead = draw(st.lists(st.integers(1, 9), min_size=0, max_size=3))
    ids = _support((*lead, k), dtype, bound, draw(st.integers(0, 2**16)), repeat, out_of_range, draw(_VIEWS))
    return ids, bound, True


def _torch_check(ids, bound, support):
    """What the torch ops of check_on_device make of one field: the clamped ids, the range
    row's [min, max], the repeat flag (a support's; else None)."""
    clamped = ids.long().clamp(0, bound - 1)
    repeats = None
    if support:
        s = clamped.sort(dim=-1).values
        repeats = int((s[..., 1:] == s[..., :-1]).any())
    return clamped.to(ids.dtype), (int(ids.min()), int(ids.max())), repeats


@settings(max_examples=40, deadline=None)
@given(fields=st.lists(st.one_of(_range_field(), _support_field()), min_size=1, max_size=3))
def test_the_kernel_clamps_folds_and_poisons_as_the_torch_ops(fields):
    """One to three fields (ids of any shape, feature supports, mixed; two a launch, the third
    in a second launch after the first's poison): each field's clamped ids, its range row's
    and repeat row's fold, the call's poison and every scratch row left reset, as the torch
    ops make them; a repeat or an out-of-range id in any token of any field is seen."""
    rows = []
    for ids, bound, support in fields:
        record = torch.tensor([3, 7], dtype=torch.int64)  # what earlier calls left
        scratch = torch.tensor(_RESET, dtype=torch.int64)
        rep = (torch.tensor([_I64.max, _I64.min], dtype=torch.int64), torch.tensor(_RESET, dtype=torch.int64))
        rows.append(IdField(ids, bound, record, scratch, *(rep if support else ())))
    poison = torch.tensor(float("nan"))  # what the call found in it: the kernel sets it
    outs = idcheck.check_ids_into(rows, poison)
    bad = False
    for (ids, bound, support), row, out in zip(fields, rows, outs, strict=True):
        clamped, (lo, hi), repeats = _torch_check(ids, bound, support)
        assert out.dtype == ids.dtype and out.is_contiguous()
        torch.testing.assert_close(out, clamped, rtol=0, atol=0)
        assert row.record_row.tolist() == [min(3, lo), max(7, hi)]
        assert row.scratch_row.tolist() == _RESET  # the last program reset it for the next call
        if support:
            assert row.repeat_row.tolist() == [repeats, repeats]
            assert row.repeat_scratch.tolist() == _RESET
        bad = bad or lo < 0 or hi >= bound or bool(repeats)
    assert bool(poison.isnan()) == bad
    if not bad:
        assert float(poison) == 1.0


def test_a_call_of_two_fields_is_one_launch_and_of_three_two(monkeypatch):
    """Two fields a launch: the query and key sides of a pattern share one."""
    launches = []
    real = idcheck._check_ids.run
    monkeypatch.setattr(idcheck._check_ids, "run", lambda *a, **kw: launches.append(1) or real(*a, **kw))
    rows = lambda: (torch.tensor([0, 0]), torch.tensor(_RESET))  # noqa: E731
    ids = torch.zeros(2, 50, dtype=torch.int32)
    for n, want in ((1, 1), (2, 1), (3, 2)):
        launches.clear()
        idcheck.check_ids_into([IdField(ids, 4, *rows()) for _ in range(n)], torch.zeros(()))
        assert len(launches) == want, n


def test_a_bound_check_launches_through_sites_in_their_layout(monkeypatch):
    """:class:`idcheck.BoundIdCheck` launches each pair of fields from a launch site: the call's
    ids and outputs as its tensors, the rows one ``Fixed`` block, the call's poison the last
    scalar and no other tensor among them (a site keys that layout: no general launch after the
    first); three fields, two sites; the same clamped ids, rows and poison as
    :func:`idcheck.check_ids_into`."""
    seen = []
    real = L.Site.__call__
    monkeypatch.setattr(L.Site, "__call__", lambda site, *a: seen.append((site, *a)) or real(site, *a))
    ids = [torch.tensor([[0, 3, 1], [2, 9, 0]], dtype=torch.int32), torch.arange(7), torch.tensor([1, -1])]

    def rows():
        return [IdField(x, 4, torch.tensor([3, 3]), torch.tensor(_RESET)) for x in ids]

    bound_rows, plain_rows = rows(), rows()
    outs, poison = idcheck.ID_CHECK.bind(bound_rows)(ids)
    plain = torch.zeros(())
    want = idcheck.check_ids_into(plain_rows, plain)
    assert len({id(site) for site, *_ in seen}) == len(seen) == 2
    for site, tensors, rest, scalars in seen:
        assert len(tensors) == 4 and all(isinstance(t, torch.Tensor) for t in tensors)
        assert len(rest) == 1 and type(rest[0]) is L.Fixed and len(rest[0].tensors) == 8
        assert scalars[-1] is poison and not any(isinstance(s, torch.Tensor) for s in scalars[:-1])
    assert seen[1][1][0] is seen[1][1][2] is ids[2]  # the second launch's one field, in both places
    for got, w in zip(outs, want, strict=True):
        torch.testing.assert_close(got, w, rtol=0, atol=0)
    for b, p in zip(bound_rows, plain_rows, strict=True):
        assert b.record_row.tolist() == p.record_row.tolist() and b.scratch_row.tolist() == _RESET
    assert bool(poison.isnan()) and bool(plain.isnan())  # the third field's -1 and the first's 9


def test_the_kernel_refuses_what_it_cannot_check():
    ids = torch.zeros(4, dtype=torch.int32)
    rec, scr, poi = torch.zeros(2, dtype=torch.int64), torch.zeros(3, dtype=torch.int64), torch.zeros(())
    check = lambda *f, poison=poi: idcheck.check_ids_into([IdField(*f)], poison)  # noqa: E731
    with pytest.raises(ValueError, match="fields must name at least one field"):
        idcheck.check_ids_into([], poi)
    with pytest.raises(ValueError, match="ids must be a non-empty tensor of 1 to 4 dims"):
        check(torch.zeros(1, 1, 1, 1, 2, dtype=torch.int32), 4, rec, scr)
    with pytest.raises(ValueError, match="ids must be a non-empty tensor"):
        check(torch.zeros(0, dtype=torch.int32), 4, rec, scr)
    with pytest.raises(ValueError, match="bound must be >= 1"):
        check(ids, 0, rec, scr)
    with pytest.raises(ValueError, match="scratch_row must be 3 contiguous torch.int64"):
        check(ids, 4, rec, scr.int())
    with pytest.raises(ValueError, match="poison must be 1 contiguous torch.float32"):
        check(ids, 4, rec, scr, poison=poi.double())
    sup = torch.zeros(2, 3, dtype=torch.int32)
    with pytest.raises(ValueError, match="repeat_scratch must be 3 contiguous torch.int64 on cpu, got None"):
        check(sup, 4, rec, scr, rec)
    with pytest.raises(ValueError, match=rf"a support's last dim must hold 2 to {idcheck.MAX_SUPPORT} ids, got 1"):
        check(torch.zeros(2, 3, 1, dtype=torch.int32), 4, rec, scr, rec, scr)
    wide = idcheck.MAX_SUPPORT + 1
    with pytest.raises(ValueError, match=rf"got {wide}"):
        check(torch.zeros(2, wide, dtype=torch.int32), 4 * wide, rec, scr, rec, scr)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
@pytest.mark.parametrize("bad", [None, ("q_bucket", 9), ("k_bucket", -2)])
def test_check_on_device_gives_the_same_through_the_kernel_and_the_torch_ops(bad, dtype):
    """One field or the other out of range, or none: the same clamped fields, poison and
    recorded error through both ways (the op's device path takes the kernel where Triton runs)."""
    assert id_check_for(torch.device("cpu")) is idcheck.ID_CHECK  # the interpreter counts here
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
    assert _same_both_ways(fields, rows, error) == (bad is not None)


def _same_both_ways(fields: dict, rows: tuple, error: str | None) -> bool:
    """check_on_device on ``fields`` through the torch ops and through the kernel: the same
    clamped fields, poison and record, and ``error`` (a message pattern, or None: no error)
    raised by both; whether the poison is NaN."""
    results = []
    for check in (None, idcheck.ID_CHECK):
        errors = DeviceErrors("op", rows, torch.device("cpu"), check)
        assert errors.id_check is check
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
    return _viewed(ids.to(dtype), view)


@pytest.mark.parametrize("bad", [None, "repeat", ("q_support", 9), ("k_support", -2)])
def test_check_on_device_gives_the_same_for_supports_through_the_kernel_and_the_torch_ops(bad):
    """A TopKFeatures pair of supports (the kernel: one launch, each field's range and repeat
    rows in it) and the torch ops: the same clamped fields, poison and record, and the same
    error raised."""
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
    assert _same_both_ways(fields, rows, error) == (bad is not None)


def test_a_support_wider_than_the_kernel_keeps_the_torch_ops():
    """No kernel for a record whose support is too wide for its repeat check: the torch ops
    check every row of such a call."""
    narrow = (Row("q_support", "range", 8), Row("q_support", "distinct", 1, 4))
    wide = (Row("q_support", "range", 256), Row("q_support", "distinct", 1, idcheck.MAX_SUPPORT + 1))
    cpu = torch.device("cpu")
    assert DeviceErrors("op", narrow, cpu, idcheck.ID_CHECK).id_check is idcheck.ID_CHECK
    assert DeviceErrors("op", wide, cpu, idcheck.ID_CHECK).id_check is None


@pytest.mark.parametrize("spec", [ts.Hash(buckets=4), ts.TopKFeatures(k=4)], ids=str)
def test_the_device_path_of_an_op_uses_the_kernel(spec, monkeypatch):
    """A call whose given ids (buckets; feature supports) are checked on the device goes
    through the kernel, one launch for both sides (counted), and equals the reference."""
    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    launches = []
    real = idcheck._check_ids.run
    monkeypatch.setattr(idcheck._check_ids, "run", lambda *a, **kw: launches.append(1) or real(*a, **kw))
    attn = ts.compile(spec, backend="triton")
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    dec = attn.decide(q, k)
    given_ = ts.Decisions(**{n: t.clone() for n, t in dec.items() if t is not None})
    torch.testing.assert_close(attn(q, k, v, decisions=given_), attn.reference(q, k, v, decisions=dec))
    assert len(launches) == 1
