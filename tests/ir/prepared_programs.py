"""A hypothesis strategy the IR tests share: a random spec and decisions, lowered and prepared."""

from __future__ import annotations

from typing import NamedTuple

from hypothesis import strategies as st

from tilesparse import ir
from tilesparse.patterns import Decisions, SpecBase
from tilesparse.testing import decisions, specs


class Drawn(NamedTuple):
    spec: SpecBase
    dec: Decisions
    causal: bool
    program: ir.Program
    prepared: ir.Prepared


@st.composite
def prepared_programs(draw, blocks: list[int]) -> Drawn:
    """B <= 2, H <= 3, T in [1, 200], head dim 8, either causality, block sizes from ``blocks``
    (drawn for each side)."""
    B, H, T = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 200))
    causal = draw(st.booleans())
    block_q, block_k = draw(st.sampled_from(blocks)), draw(st.sampled_from(blocks))
    spec = draw(specs(heads=H))
    dec = draw(decisions(spec, (B, H, T, 8)))
    program = ir.lower(spec, causal=causal, block_q=block_q, block_k=block_k)
    prepared = ir.prepare(program, dec, batch=B, heads=H, seqlen=T, device="cpu")
    return Drawn(spec, dec, causal, program, prepared)
