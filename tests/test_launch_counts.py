"""Kernel launches per call, held to what they are now: a call's host time is mostly its
launches (a few to tens of microseconds each on the GPU), so a change that adds one to a
built-in pattern's call fails here, in CI, before any benchmark sees it.

Counted under the interpreter (every Triton launch of the call, forward and backward), with the
device path of the decision checks (``validate=True`` on a GPU: the ids checked by a kernel).
"""

from __future__ import annotations

import pytest
import torch
from triton.runtime.interpreter import InterpretedFunction

import tilesparse as ts
from tilesparse.patterns import decision_errors

from builtin_specs import given_decisions, one_of_each_kind

SPECS = one_of_each_kind(keep=0.7, buckets=4, k=4)

# launches a call of each pattern takes at most: the index build (sort, scatter and the block
# pass; one pass where no token is reordered), the attention forward (a launch pair per head
# group: the kernel and its sanitizing variant), its backward (dQ and dK/dV, a pair each) and,
# for given ids, their check (one launch for both sides)
MOST = {  # pattern: (forward trusted, forward given, forward+backward given)
    "dense": (3, 3, 7),
    "qkdrop": (5, 5, 9),
    "hash": (5, 6, 10),
    "topk": (3, 4, 8),
    "hybrid": (5, 6, 10),
    "perhead": (8, 9, 17),
}


@pytest.fixture
def launches(monkeypatch):
    """The names of the Triton kernels launched (and run) while the test runs."""
    names: list[str] = []
    real = InterpretedFunction.run

    def counted(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", counted)
    return names


@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_call_launches_no_more_kernels_than_it_does_now(name, launches, monkeypatch):
    monkeypatch.setattr(decision_errors, "DEFERRED_DEVICES", frozenset({"cuda", "cpu"}))
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, 2, 24, 16), generator=g, requires_grad=True)
    k, v = (torch.randn((1, 1, 24, 16), generator=g, requires_grad=True) for _ in range(2))
    trusted = attn.decide(q, k)
    given = given_decisions(attn, q, k)
    attn(q, k, v, decisions=given).sum().backward()  # warm: plans made, kernels compiled
    counts = []
    for decisions, backward in ((trusted, False), (given, False), (given, True)):
        launches.clear()
        out = attn(q, k, v, decisions=decisions)
        if backward:
            out.sum().backward()
        counts.append(len(launches))
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=given))  # the counted call is exact
    assert all(n <= most for n, most in zip(counts, MOST[name], strict=True)), (name, counts, MOST[name], launches)
