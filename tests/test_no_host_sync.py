"""A warmed-up call makes no host synchronization: CPU, Triton interpreted, with a counting double.

There is no GPU here, so "the host waits for the device" is counted by what would cause it on
one. :class:`SyncCounter` counts, during a call (forward and backward):

- through a ``TorchDispatchMode``: ``aten._local_scalar_dense`` (every ``.item()``,
  ``int(t)``, ``bool(t)``, ``float(t)``, ``if t:``), ops whose output size depends on the data
  (``nonzero``, ``masked_select``, ``unique``, boolean-mask indexing, ``repeat_interleave``
  by a tensor) and ``lift_fresh`` (a tensor made from Python data: an upload that waits on a
  GPU, and that a CUDA graph cannot capture, e.g. indexing with a Python list);
- by patching: ``Tensor.tolist``, ``.cpu``, ``.numpy`` and ``torch.cuda.synchronize`` /
  ``Event.synchronize`` / ``Stream.synchronize``.

What it cannot see: a copy between devices (every tensor here is on the CPU), a wait inside a
kernel launcher or inside a C++ op that reads device memory without dispatching a scalar read,
and the CUDA caching allocator; tests/gpu/test_graph_capture_gpu.py covers those with
``torch.cuda.set_sync_debug_mode("error")`` and a ``torch.cuda.graph`` capture. The Triton
interpreter runs kernels on the host and reads their tensors there, so a kernel launch is not
counted (on a GPU it is an asynchronous launch). The error record's host copy
(:mod:`tilesparse.patterns.decision_errors`) is pinned host memory on a GPU: reading it is
not a wait, and it is not counted. Validation runs its device path here (``DEFERRED_DEVICES``
includes the CPU for these tests), as it does on CUDA.
"""

from __future__ import annotations

import contextlib
import re

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tilesparse as ts
from tilesparse.patterns import decision_errors

from builtin_specs import assert_poison_reaches, assert_poisoned_gradient, one_of_each_kind

SPECS = one_of_each_kind(keep=0.6, buckets=4, k=4, hybrid_buckets=3, dense_head=1)

_DATA_SIZED = {"nonzero", "masked_select", "_unique", "_unique2", "unique_dim", "unique_consecutive"}


class SyncCounter(TorchDispatchMode):
    """Counts what would make the host wait for a GPU (see the module docstring); ``events``
    lists them."""

    def __init__(self, allowed: tuple[torch.Tensor, ...] = ()):
        super().__init__()
        self.events: list[str] = []
        self._allowed = {id(t) for t in allowed}
        self._paused = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self._paused:
            name = func._schema.name.removeprefix("aten::")
            if name in ("_local_scalar_dense", "lift_fresh") or name in _DATA_SIZED:
                self.events.append(name)
            elif name in ("index", "index_put", "index_put_") and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or ())
            ):
                self.events.append(f"{name} with a boolean mask")
            elif name == "repeat_interleave" and isinstance(args[0], torch.Tensor) and func.__name__ == "Tensor":
                self.events.append("repeat_interleave by a tensor")
        return func(*args, **kwargs)

    def note(self, what: str, t=None) -> None:
        if not self._paused and (t is None or id(t) not in self._allowed):
            self.events.append(what)

    @contextlib.contextmanager
    def paused(self):
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1


@contextlib.contextmanager
def counting_syncs(monkeypatch):
    """A :class:`SyncCounter` active inside the block, with the Python-level reads patched and
    the interpreter's kernel runs left out."""
    from triton.runtime.interpreter import InterpretedFunction

    allowed = tuple(e.host for e in list(decision_errors._LIVE))
    counter = SyncCounter(allowed)
    for method in ("tolist", "cpu", "numpy"):
        original = getattr(torch.Tensor, method)

        def patched(self, *a, _original=original, _method=method, **kw):
            counter.note(f"Tensor.{_method}", self)
            return _original(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, method, patched)
    for owner in (torch.cuda, torch.cuda.Event, torch.cuda.Stream):
        monkeypatch.setattr(owner, "synchronize", lambda *a, **kw: counter.note("cuda synchronize"))
    run = InterpretedFunction.run

    def run_unseen(self, *a, **kw):
        with counter.paused():
            return run(self, *a, **kw)

    monkeypatch.setattr(InterpretedFunction, "run", run_unseen)
    with counter:
        yield counter


def _inputs(seed=0, T=64, H=2, D=16):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(1, H, T, D, generator=g, requires_grad=True) for _ in range(3))


def _step(attn, q, k, v, decisions):
    out = attn(q, k, v, decisions=decisions)
    out.square().sum().backward()
    return out


@pytest.fixture
def device_checks(monkeypatch):
    """validate=True's device path on the CPU, as on CUDA."""
    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))


@pytest.mark.parametrize("given", [True, False], ids=["decisions_given", "decisions_made"])
@pytest.mark.parametrize("backend", ["triton", "reference"])
@pytest.mark.parametrize("name", list(SPECS))
def test_a_warmed_up_call_makes_no_host_sync(name, backend, given, device_checks, monkeypatch):
    attn = ts.compile(SPECS[name], backend=backend)
    q, k, v = _inputs()
    fresh = lambda: ts.Decisions(**{n: t.clone() for n, t in attn.decide(q, k).items() if t is not None})  # noqa: E731
    dec = fresh() if given else None  # clones: untrusted, so every id is checked
    _step(attn, q, k, v, dec)  # plans, compiles, caches the head indices and the error record
    dec = fresh() if given else None
    with counting_syncs(monkeypatch) as counter:
        _step(attn, q, k, v, dec)
    assert counter.events == [], f"host syncs in a warmed-up call: {counter.events}"


def test_the_double_sees_what_it_claims_to(monkeypatch):
    """Each kind of sync it counts, once: the double can fail."""
    t = torch.arange(6).view(2, 3)
    with counting_syncs(monkeypatch) as counter:
        t.sum().item()
        bool(t.max() > 2)
        t.nonzero()
        t[t > 2]
        t[:, [0, 2]]
        t.tolist()
        t.cpu()
        torch.cuda.synchronize()
    assert counter.events == [
        "_local_scalar_dense", "_local_scalar_dense", "nonzero", "index with a boolean mask", "lift_fresh",
        "Tensor.tolist", "Tensor.cpu", "cuda synchronize",
    ]  # fmt: skip


def test_validate_true_on_the_host_path_is_seen_syncing(monkeypatch):
    """Without the device path (the CPU's own behaviour) a given decision is read back: the
    double counts it, so the test above would catch a read-back left in."""
    attn = ts.compile(ts.Hash(buckets=4), backend="reference")
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    given = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())
    with counting_syncs(monkeypatch) as counter:
        attn(q, k, v, decisions=given)
    assert "_local_scalar_dense" in counter.events


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_a_bad_bucket_id_gives_nan_then_a_clear_error(backend, device_checks):
    attn = ts.compile(ts.Hash(buckets=4), backend=backend)
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    bad = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())
    bad.k_bucket[0, 1, 7] = 1000
    out = attn(q, k, v, decisions=bad)  # clamped for the build: no out-of-bounds read
    assert out.isnan().all()
    out.sum().backward()  # d(sum)/d(out) is finite: the poison reaches the gradients itself
    assert all(t.grad.isnan().any() for t in (q, k, v))
    with pytest.raises(ValueError, match=r"decisions\.k_bucket values must lie in \[0, 4\), got \[0, 1000\]"):
        attn(q, k, v, decisions=dec)  # the next call reports it
    torch.testing.assert_close(attn(q, k, v, decisions=dec), attn.reference(q, k, v, decisions=dec))  # reported once


@pytest.mark.parametrize("paired", [False, True], ids=["forward_in_one_launch", "forward_pair"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", ["hash", "hybrid", "topk", "perhead"])
def test_the_folded_poison_reaches_what_the_product_did(name, causal, paired, device_checks):
    """The Triton forward folds a bad call's poison into its stored output and lse (no product
    of its own, tests/test_launch_counts.py): the output is NaN and the gradients NaN or 0, as
    far as ``unfolded_poison()``'s product of the output with the poison reaches
    (``assert_poison_reaches``); GQA, a length that is no block multiple, an inf in v, and
    through the forward's launch pair; PerHead's two head groups (here unfused) each fold it."""
    from tilesparse.backends.triton.nonfinite import sanitize_in_pairs
    from tilesparse.execute import unfolded_poison

    attn = ts.compile(SPECS[name], causal=causal, backend="triton")
    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 4, 45, 16, generator=g)
    k, v = (torch.randn(1, 2, 45, 16, generator=g) for _ in range(2))
    v[0, 1, 30, 2] = float("inf")
    bad = {n: t.clone() for n, t in attn.decide(q, k).items() if t is not None}
    field = "k_support" if name == "topk" else "k_bucket"
    bad[field][0, 3, 7] = 1000  # clamped for the build
    grad_out = torch.randn(1, 4, 45, 16, generator=g)

    def run(switch):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with switch(), sanitize_in_pairs() if paired else contextlib.nullcontext():
            out = attn(*leaves, decisions=ts.Decisions(**{n: t.clone() for n, t in bad.items()}))
            got = [out.detach(), *torch.autograd.grad(out, leaves, grad_out)]
        # the product's node, or not: the two arms differ (PerHead's two groups are merged)
        assert (type(out.grad_fn).__name__ == "MulBackward0") == (switch is unfolded_poison)
        with pytest.raises(ValueError, match=rf"decisions\.{field} values must lie in \[0, \d+\)"):
            ts.check_errors()
        return got

    assert_poison_reaches(run(contextlib.nullcontext), run(unfolded_poison))


def test_check_errors_reports_and_forgets(device_checks):
    attn = ts.compile(ts.TopKFeatures(k=4), backend="reference")
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    ts.check_errors()  # nothing recorded: no error
    sup = dec.q_support.clone()
    sup[0, 0, 3, 1] = sup[0, 0, 3, 0]
    out = attn(q, k, v, decisions=ts.Decisions(q_support=sup, k_support=dec.k_support))
    assert out.isnan().all()
    with pytest.raises(ValueError, match=r"decisions\.q_support repeats a feature id"):
        ts.check_errors()
    ts.check_errors()  # raised once, then forgotten
    good = attn(q, k, v, decisions=ts.Decisions(q_support=dec.q_support.clone(), k_support=dec.k_support))
    assert not good.isnan().any()


def test_padding_keeps_the_poison(device_checks):
    attn = ts.compile(ts.Hash(buckets=4), backend="reference")
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    bad = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())
    bad.q_bucket[0, 0, 0] = -1
    pad = torch.ones(1, 64, dtype=torch.bool)
    pad[0, :5] = False
    assert attn(q, k, v, decisions=bad, key_padding_mask=pad).isnan().all()
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 4\), got \[-1, 3\]"):
        ts.check_errors()


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_packed_documents_with_max_documents_make_no_host_sync(backend, device_checks, monkeypatch):
    attn = ts.compile(ts.Hash(buckets=2), backend=backend)
    q, k, v = _inputs()
    docs = torch.tensor([[0] * 20 + [1] * 30 + [2] * 14])
    pad = torch.ones(1, 64, dtype=torch.bool)
    pad[0, :3] = False
    dec = attn.decide(q, k)
    given = lambda: ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())  # noqa: E731
    kw = dict(key_padding_mask=pad, document_ids=docs, max_documents=4)
    want = attn.reference(q, k, v, decisions=dec, key_padding_mask=pad, document_ids=docs)
    torch.testing.assert_close(attn(q, k, v, decisions=given(), **kw), want)
    with counting_syncs(monkeypatch) as counter:
        attn(q, k, v, decisions=given(), **kw).square().sum().backward()
    assert counter.events == [], f"host syncs in a warmed-up packed call: {counter.events}"
    with counting_syncs(monkeypatch) as counter:  # without max_documents the ids' range is read back
        attn(q, k, v, decisions=given(), key_padding_mask=pad, document_ids=docs)
    assert counter.events.count("Tensor.tolist") == 1


@pytest.mark.parametrize("given", [False, True], ids=["decisions_made", "bad_bucket_too"])
@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_a_document_id_past_max_documents_gives_nan_then_a_clear_error(backend, given, device_checks):
    """The documents' poison (folded into the Triton forward, a product elsewhere) reaches the
    output and the gradients, alone or with a bad bucket id's (both reported)."""
    attn = ts.compile(ts.Hash(buckets=2), backend=backend)
    q, k, v = _inputs()
    docs = torch.tensor([[0] * 20 + [1] * 30 + [5] * 14])
    dec = None
    if given:
        made = attn.decide(q, k)
        dec = ts.Decisions(q_bucket=made.q_bucket.clone(), k_bucket=made.k_bucket.clone())
        dec.k_bucket[0, 1, 3] = 7
    out = attn(q, k, v, decisions=dec, document_ids=docs, max_documents=4)
    assert out.isnan().all()
    if backend == "triton":  # folded into the forward: the op's own node, no product's
        assert type(out.grad_fn).__name__ == "_SparseAttentionBackward"
    out.sum().backward()
    for t, what in zip((q, k, v), ("dq", "dk", "dv"), strict=True):
        assert_poisoned_gradient(t.grad, what)
    raised = []
    for _ in range(2 if given else 1):  # a record per kind of check: one error each
        with pytest.raises(ValueError) as e:
            ts.check_errors()
        raised.append(str(e.value))
    ts.check_errors()  # nothing more
    wanted = [r"document_ids values must lie in \[0, 4\), got \[0, 5\]"]
    wanted += [r"decisions\.k_bucket values must lie in \[0, 2\), got \[0, 7\]"] if given else []
    assert all(any(re.search(w, m) for m in raised) for w in wanted), raised


def test_max_documents_is_checked_at_once_on_the_cpu():
    attn = ts.compile(ts.Hash(buckets=2), backend="reference")
    q, k, v = _inputs()
    docs = torch.tensor([[0] * 50 + [4] * 14])
    with pytest.raises(ValueError, match=r"document_ids values must lie in \[0, 4\) \(max_documents=4\), got \[0, 4\]"):
        attn(q, k, v, document_ids=docs, max_documents=4)
    with pytest.raises(ValueError, match=r"max_documents must be an int >= 1"):
        attn(q, k, v, document_ids=docs, max_documents=0)
    with pytest.raises(ValueError, match=r"pass document_ids too"):
        attn(q, k, v, max_documents=2)
    dec = attn.decide(q, k)
    bounded = attn(q, k, v, decisions=dec, document_ids=docs, max_documents=8)
    torch.testing.assert_close(bounded, attn(q, k, v, decisions=dec, document_ids=docs))


def test_a_user_criterion_is_checked_on_the_device_without_a_sync(device_checks, monkeypatch):
    calls = []

    @ts.criterion("test-sync-buckets", produces="bucket", replace=True)
    def shifted(q, k, /, *, buckets, generator=None):
        calls.append(1)
        off = len(calls) >= 3  # the third call on returns an id past the range
        qb = (q[..., 0] > 0).to(torch.int64) + (buckets if off else 0) * (q[..., 1] > 2)
        return qb, (k[..., 0] > 0).to(torch.int64)

    attn = ts.compile(ts.Hash(buckets=2, criterion="test-sync-buckets"), backend="triton")
    q, k, v = _inputs()
    _step(attn, q, k, v, None)
    with counting_syncs(monkeypatch) as counter:
        out = attn(q, k, v)
    assert counter.events == [] and not out.isnan().any()
    assert attn(q, k, v).isnan().all()
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 2\), got \[0, 3\]"):
        attn(q, k, v)


def test_a_user_criterion_outside_an_op_call_is_still_read_back(device_checks):
    """Only an op's decide step, which checks the ids on the device itself, skips the read-back
    (a KV cache or a direct call still checks at once)."""

    @ts.criterion("test-sync-out-of-range", produces="bucket", replace=True)
    def out_of_range(q, k, /, *, buckets, generator=None):
        return torch.full(q.shape[:3], buckets), torch.zeros(k.shape[:3], dtype=torch.int64)

    q, k, _ = _inputs()
    with pytest.raises(ValueError, match=r"q_side values must lie in \[0, 2\)"):
        ts.patterns.get_criterion("test-sync-out-of-range")(q, k, buckets=2)


@pytest.mark.parametrize("backend", ["triton", "reference"])
def test_index_tensor_sizes_depend_on_the_sizes_only(backend):
    """Every index tensor's shape comes from B, H, T, the blocks and the bucket count: decisions
    that drop every token, keep every token or put them all in one bucket allocate the same."""
    spec = ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.5)])
    attn = ts.compile(spec, backend=backend)
    q, k, v = _inputs()
    shape = (1, 2, 64)

    def fixed(keep: bool, bucket: torch.Tensor) -> ts.Decisions:
        keeps = torch.full(shape, keep)
        return ts.Decisions(q_keep=keeps, k_keep=keeps.clone(), q_bucket=bucket, k_bucket=bucket.clone())

    variants = [
        attn.decide(q, k),
        fixed(False, torch.zeros(shape, dtype=torch.int64)),  # every token dropped
        fixed(True, torch.arange(64).remainder(4).expand(shape)),  # every token kept, buckets spread
    ]
    names = ("q_order", "k_order", "q_ranges", "q_nseg", "k_ranges", "k_nseg")
    sizes = set()
    for dec in variants:
        (g,) = attn.prepare(q, k, v, decisions=dec).groups
        sizes.add(tuple(tuple(getattr(g, n).shape) for n in names))
    assert len(sizes) == 1, sizes


def test_the_log_sum_exp_is_poisoned_with_the_output(device_checks):
    attn = ts.compile(ts.Hash(buckets=4), backend="reference")
    q, k, v = _inputs()
    dec = attn.decide(q, k)
    bad = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())
    bad.q_bucket[0, 1, 9] = 4
    out, lse = attn(q, k, v, decisions=bad, return_lse=True)
    assert out.isnan().all() and lse.isnan().all()
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 4\)"):
        ts.check_errors()
