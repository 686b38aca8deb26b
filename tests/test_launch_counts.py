"""Device work per call, held to what it is now: a call's host time is mostly its launches (a
few to tens of microseconds each on the GPU), so a change that adds one to a built-in pattern's
call fails here, in CI, before any benchmark sees it.

Counted under the interpreter, forward and backward, with the device path of the decision checks
(``validate=True`` on a GPU: the ids checked by a kernel): every Triton launch, and every torch op
the call dispatches outside them that is neither a view nor an allocation (a fill, a copy, a
sum, a cast: each a kernel of its own on the GPU). The backward is taken with
``torch.autograd.grad`` and a given output gradient, so no op of the test's own is counted.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime.interpreter import InterpretedFunction

import tilesparse as ts
from tilesparse.patterns import decision_errors

from builtin_specs import given_decisions, one_of_each_kind

SPECS = one_of_each_kind(keep=0.7, buckets=4, k=4)

# device work a call of each pattern takes at most (q with two heads, k and v with one: GQA).
# Triton: the index build (the sort keys and their scatter in one launch for sides of at most
# 4,096 rows, as here, then the block pass; one pass where no token is reordered), the attention
# forward (a launch per head group at D <= 64, as here, where it sanitizes in its own launch; a
# launch pair, the kernel and its sanitizing variant, above), its backward (dQ and dK/dV, a pair
# each, and the sum of the per-query-head dK and dV into the kv heads) and, for
# given ids, their check (one launch for both sides). The two passes' non-finite flags are zeroed
# in the index build's block pass (no fill of their own). torch: for given ids, the copy of their
# check's record to the host (the poison itself is folded into each Triton group's stored output
# and lse); TopKFeatures' q~ and k~ (one launch for both sides, features.py) and their
# gradients (one launch); PerHead's head selections and the gradients' sums over its groups
MOST = {  # pattern: (forward trusted, forward given, forward+backward given)
    "dense": (2, 2, 7),
    "qkdrop": (3, 3, 8),
    "hash": (3, 5, 10),
    "topk": (3, 5, 11),
    "hybrid": (3, 5, 10),
    "perhead": (7, 9, 27),
}
_ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


@pytest.fixture
def launches(monkeypatch):
    """Counts device work: ``with launches.counting() as names:`` gives the names of the Triton
    kernels launched inside the block and of the torch ops dispatched there outside them
    (:class:`_DeviceOps`)."""
    counter = _Counter()
    real = InterpretedFunction.run

    def counted(self, *args, **kwargs):
        counter.names.append(self.fn.__name__)
        counter.inside += 1
        try:
            return real(self, *args, **kwargs)
        finally:
            counter.inside -= 1

    monkeypatch.setattr(InterpretedFunction, "run", counted)
    return counter


class _Counter:
    def __init__(self):
        self.names: list[str] = []
        self.inside = 0  # inside a Triton launch: the interpreter's own torch ops are not the call's

    @contextlib.contextmanager
    def counting(self):
        self.names.clear()
        with _DeviceOps(self):
            yield self.names


class _DeviceOps(TorchDispatchMode):
    """Appends each dispatched torch op that launches work on a device (not a view, not an
    allocation) to the counter's names, outside Triton launches."""

    def __init__(self, counter: _Counter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.counter.inside and not func.is_view and func.overloadpacket.__name__ not in _ALLOCATIONS:
            self.counter.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_call_launches_no_more_kernels_than_it_does_now(name, launches, monkeypatch):
    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, 2, 24, 16), generator=g, requires_grad=True)
    k, v = (torch.randn((1, 1, 24, 16), generator=g, requires_grad=True) for _ in range(2))
    trusted = attn.decide(q, k)
    given = given_decisions(attn, q, k)
    grad_out = torch.randn((1, 2, 24, 16), generator=g)
    torch.autograd.grad(attn(q, k, v, decisions=given), (q, k, v), grad_out)  # warm: plans made, kernels compiled
    counts = []
    for decisions, backward in ((trusted, False), (given, False), (given, True)):
        with launches.counting() as names:
            out = attn(q, k, v, decisions=decisions)
            if backward:
                torch.autograd.grad(out, (q, k, v), grad_out)
        counts.append(len(names))
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=given))  # the counted call is exact
    assert all(n <= most for n, most in zip(counts, MOST[name], strict=True)), (name, counts, MOST[name], names)


def test_the_bernoulli_criterion_decides_without_a_copy_of_k(launches):
    """With grouped-query attention a QKDrop op's decisions read k's length alone: one draw and
    two comparisons, no copy of k per query head; the draws are those of the spec's own
    ``decide`` on k per query head."""
    spec = ts.QKDrop(keep=0.7)
    attn = ts.compile(spec, causal=True, backend="triton")
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, 4, 24, 16), generator=g)
    k = torch.randn((1, 1, 30, 16), generator=g)
    with launches.counting() as names:
        made = attn.decide(q, k, generator=torch.Generator().manual_seed(3))
    assert sorted(names) == ["aten.lt.Scalar", "aten.lt.Scalar", "aten.rand.generator"], names
    want = spec.decide(q, k.repeat_interleave(4, dim=1), generator=torch.Generator().manual_seed(3))
    assert torch.equal(made.q_keep, want.q_keep) and torch.equal(made.k_keep, want.k_keep)
