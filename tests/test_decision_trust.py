"""Decisions edited after ``decide()`` and out-of-range ids: never a crash, never a wrong
number, whatever ``validate`` says.

Trust (skipping the value checks) holds only while the tensors hold what the spec's criteria
wrote: an in-place edit ends it. On the CPU a bad id raises in the call, whatever
``validate`` says (no sync to save). On a GPU, ``validate=True`` checks on the device and
raises at the next call or from ``tilesparse.check_errors()`` (tests/test_no_host_sync.py
runs that path on the CPU; tests/gpu/test_graph_capture_gpu.py on CUDA), and
``validate=False`` uses a device-side assertion (exercised here through
``check_decision_tensor``; CUDA itself in tests/gpu). CPU, Triton interpreted.
"""

import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import tilesparse as ts
from tilesparse.patterns.decisions import check_decision_tensor


def _qkv(T=70):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, T, 16, generator=g) for _ in range(3))


@pytest.mark.parametrize("backend", ["reference", "executor", "triton"])
@pytest.mark.parametrize("bad", [-1, 9])
def test_an_id_edited_in_place_after_decide_is_refused(backend, bad):
    q, k, v = _qkv()
    attn = ts.compile(ts.Hash(buckets=4), backend=backend)
    dec = attn.decide(q, k)
    attn(q, k, v, decisions=dec)  # trusted and unchanged: runs
    dec.q_bucket[0, 0, 5] = bad
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 4\)"):
        attn(q, k, v, decisions=dec)


@pytest.mark.parametrize("backend", ["reference", "triton"])
@pytest.mark.parametrize("bad", [-1, 1000])
def test_validate_false_still_refuses_out_of_range_ids_on_the_cpu(backend, bad):
    q, k, v = _qkv()
    attn = ts.compile(ts.Hash(buckets=4), backend=backend, validate=False)
    dec = ts.Decisions(q_bucket=torch.zeros(1, 2, 70, dtype=torch.int64), k_bucket=torch.zeros(1, 2, 70, dtype=torch.int64))
    dec.k_bucket[0, 1, 3] = bad
    with pytest.raises(ValueError, match=r"decisions\.k_bucket values must lie in \[0, 4\)"):
        attn(q, k, v, decisions=dec)


def test_a_feature_id_edited_after_decide_is_refused():
    q, k, v = _qkv()
    attn = ts.compile(ts.TopKFeatures(k=4), backend="executor")
    dec = attn.decide(q, k)
    dec.k_support[0, 1, 2, 0] = 16
    with pytest.raises(ValueError, match=r"decisions\.k_support values must lie in \[0, 16\)"):
        attn(q, k, v, decisions=dec)


def test_trust_ends_with_any_in_place_write_or_a_swapped_tensor():
    q, k, _ = _qkv()
    spec = ts.Hash(buckets=4)
    attn = ts.compile(spec)
    dec = attn.decide(q, k)
    assert dec.trusted_for(spec)
    assert not dec.trusted_for(ts.Hash(buckets=2))
    dec.q_bucket.add_(0)  # a write that changes nothing still ends the trust
    assert not dec.trusted_for(spec)
    dec = attn.decide(q, k)
    object.__setattr__(dec, "k_bucket", dec.k_bucket.clone())
    assert not dec.trusted_for(spec)
    view = attn.decide(q, k)
    view.q_bucket.view(-1)[0] = 3  # a write through a view
    assert not view.trusted_for(spec)


@pytest.mark.parametrize("storage", ["fake", "meta"])
def test_decisions_without_real_storage_are_never_trusted(storage):
    spec = ts.Hash(buckets=2)
    real = ts.Decisions(q_bucket=torch.zeros(1, 2, 8, dtype=torch.int64), k_bucket=torch.zeros(1, 2, 8, dtype=torch.int64))
    assert real.trusted(spec).trusted_for(spec)  # the same decisions with storage are
    if storage == "meta":
        dec = ts.Decisions(**{n: t.to("meta") for n, t in real.items() if t is not None})
        assert not dec.trusted(spec).trusted_for(spec)
        return
    with FakeTensorMode() as mode, warnings.catch_warnings():
        warnings.simplefilter("error")  # no data pointer of a fake tensor is read
        dec = ts.Decisions(**{n: mode.from_tensor(t) for n, t in real.items() if t is not None})
        assert not dec.trusted(spec).trusted_for(spec)


def test_the_device_side_check_stops_an_out_of_range_id_without_reading_it_back():
    t = torch.tensor([[[0, 1, 7]]])
    kw = dict(kind="bucket", shape=(1, 1, 3), device=t.device, hi=4, values=False)
    check_decision_tensor("decisions.q_bucket", t.clamp_max(3), device_values=True, **kw)
    with pytest.raises(RuntimeError, match=r"decisions\.q_bucket values must lie in \[0, 4\)"):
        check_decision_tensor("decisions.q_bucket", t, device_values=True, **kw)
    check_decision_tensor("decisions.q_bucket", t, device_values=False, **kw)  # nothing asked


def test_trusted_decisions_are_checked_once_per_call_sizes_and_again_when_trust_ends(monkeypatch):
    """The structural checks of trusted decisions (fields, shapes, devices, dtypes) run on their
    first call at given sizes only; decisions made for other sizes still raise, and an edit
    or a swapped tensor (trust ended) brings every check back."""
    import tilesparse.api as api

    calls = []
    check = api.check_decisions
    monkeypatch.setattr(api, "check_decisions", lambda dec, **kw: calls.append(kw["values"]) or check(dec, **kw))
    q, k, v = _qkv()
    spec = ts.Hash(buckets=4)
    attn = ts.compile(spec, backend="reference")
    dec = attn.decide(q, k)
    want = attn(q, k, v, decisions=dec)
    for _ in range(3):
        torch.testing.assert_close(attn(q, k, v, decisions=dec), want, rtol=0, atol=0)
    assert calls == [False]  # checked once, the values never read back (trusted)
    q2, k2, v2 = _qkv(T=64)
    with pytest.raises(ValueError, match=r"decisions\.k_bucket must have shape \(1, 2, 64\)"):
        attn(q2, k2, v2, decisions=dec)
    assert calls == [False, False]
    other = ts.compile(ts.Hash(buckets=2), backend="reference")  # another spec's ranges: checked
    with pytest.raises(ValueError, match=r"values must lie in \[0, 2\)"):
        other(q, k, v, decisions=ts.Decisions(q_bucket=dec.q_bucket.clone().fill_(3), k_bucket=dec.k_bucket))
    calls.clear()
    object.__setattr__(dec, "k_bucket", dec.k_bucket.view_as(dec.k_bucket))  # same storage, another object
    assert not dec.trusted_for(spec)
    attn(q, k, v, decisions=dec)
    dec.q_bucket[0, 0, 0] = 9  # trust ended: the values are read back and refused
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 4\)"):
        attn(q, k, v, decisions=dec)
    assert calls == [True, True]
