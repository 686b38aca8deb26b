"""``generator=`` under ``torch.compile``: dynamo cannot trace a torch.Generator, so a call that
draws its decisions from one is never compiled with the seed dropped. With ``fullgraph=True``
it is an error saying what to do (decide outside, pass ``decisions=``); otherwise the call
runs eagerly and honours the seed. CPU.
"""

import pytest
import torch

import tilesparse as ts


def _inputs():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, 70, 16, generator=g) for _ in range(3))


def test_same_seed_same_output_when_compiled_without_fullgraph():
    q, k, v = _inputs()
    attn = ts.compile(ts.QKDrop(keep=0.5), backend="reference")
    f = torch.compile(lambda q, k, v, g: attn(q, k, v, generator=g), backend="eager")
    seeded = lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    a, b, c = f(q, k, v, seeded(0)), f(q, k, v, seeded(0)), f(q, k, v, seeded(1))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(a, attn(q, k, v, generator=seeded(0)))


def test_fullgraph_refuses_a_generator_and_names_the_way_out():
    q, k, v = _inputs()
    attn = ts.compile(ts.QKDrop(keep=0.5), backend="reference")
    f = torch.compile(lambda q, k, v, g: attn(q, k, v, generator=g), fullgraph=True, backend="eager")
    with pytest.raises(Exception, match=r"generator= cannot be used inside torch.compile"):
        f(q, k, v, torch.Generator().manual_seed(0))
    # the way out: decisions drawn outside, given inside
    g = torch.compile(lambda q, k, v, d: attn(q, k, v, decisions=d), fullgraph=True, backend="eager")
    dec = lambda: attn.decide(q, k, generator=torch.Generator().manual_seed(0))  # noqa: E731
    assert torch.equal(g(q, k, v, dec()), g(q, k, v, dec()))
