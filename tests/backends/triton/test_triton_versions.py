"""The table of Triton defects (backends/triton/versions.py) against the installed Triton, and
each workaround applied exactly where its defect is.

The release rule is checked on its own; the compiler's folding of a loop-carried scalar is
measured by compiling a reproducer for sm_90 (carried_scalar_probe.py, in a child process
without the interpreter, ~10 s), and the interpreter's numpy 2.4 failure by running a loop with
a runtime bound. The kernels' two forms of the segment loop (carried or re-read) are run under
the interpreter against the reference; test_compile_sm90.py checks that the form the installed
release compiles keeps the skip of shared tiles. The bf16 dot patch has its test in
test_triton_interpreter.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import tilesparse as ts
from tilesparse.backends.triton import kernels
from tilesparse.backends.triton.op import override_config
from tilesparse.backends.triton.versions import (
    CARRIED_SCALAR_FOLDED,
    INTERPRETER_BF16_DOT,
    INTERPRETER_NUMPY_2_4,
    Defect,
    installed_triton,
    release,
)
from tilesparse.testing import assert_equivalent

from sm90_child import run_compiling


def test_release_rule():
    """Measured releases answer for themselves; an unmeasured one like the nearest measured
    release below it; one below every measured release is assumed affected."""
    assert release("3.7.1") == (3, 7) and release("3.10.0+git1a2b") == (3, 10)
    d = Defect("x", "y", broken=frozenset({(3, 6), (3, 9)}), fixed=frozenset({(3, 7)}))
    assert [d.affects(f"3.{m}.0") for m in range(4, 12)] == [True, True, True, False, False, True, True, True]
    assert d.affects((3, 7)) is False
    for defect in (INTERPRETER_BF16_DOT, CARRIED_SCALAR_FOLDED, INTERPRETER_NUMPY_2_4):
        assert not defect.broken & defect.fixed, defect.what
    assert CARRIED_SCALAR_FOLDED.affects("3.6.0") and CARRIED_SCALAR_FOLDED.affects("3.7.1")
    assert not CARRIED_SCALAR_FOLDED.affects("3.8.0") and not CARRIED_SCALAR_FOLDED.affects("3.9.0")
    assert INTERPRETER_NUMPY_2_4.affects("3.6.0") and not INTERPRETER_NUMPY_2_4.affects("3.7.1")


def test_carried_scalar_folding_matches_the_table():
    """The installed compiler folds the reproducer's carried scalar exactly when the table
    says so, and the kernels carry it exactly where it is not folded."""
    r = run_compiling(str(Path(__file__).with_name("carried_scalar_probe.py")))
    assert r["ttir_operand"].startswith("%prev_hi"), f"the reproducer no longer carries prev_hi in TTIR: {r}"
    folded = not r["ttgir_operand"].startswith("%prev_hi")
    assert folded == CARRIED_SCALAR_FOLDED.affects(), (
        f"Triton {triton.__version__} {'folds' if folded else 'keeps'} the carried scalar ({r}): "
        "record it in versions.CARRIED_SCALAR_FOLDED"
    )
    assert bool(kernels.CARRY_PREV_HI) == (not folded)


@pytest.mark.parametrize("carry", [False, True], ids=["reread", "carried"])
def test_both_forms_of_the_segment_loop_skip_shared_tiles(carry, monkeypatch):
    """Hash buckets over 16-wide tiles give blocks many segments whose row ranges share a tile:
    either form of the previous segment's end visits each tile once (the interpreter reads the
    module's constant at every launch)."""
    monkeypatch.setattr(kernels, "CARRY_PREV_HI", tl.constexpr(carry))
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn((1, 2, 96, 16), generator=g) for _ in range(3))
    with override_config(block_q=32, block_k=32, fwd_n=16, dq_n=16, dkdv_m=16, single_loop=0):
        assert_equivalent(ts.compile(ts.Hash(buckets=6), backend="triton"), q, k, v)


@triton.jit
def _prefix_sums(X, OUT, n):
    total = 0.0
    for i in range(n):
        total += tl.load(X + i)
        tl.store(OUT + i, total)


def test_interpreter_runs_a_loop_with_a_runtime_bound_on_the_installed_numpy():
    """The loop runs here (tests/conftest.py refuses numpy >= 2.4 with an affected Triton); on
    numpy >= 2.4 that shows the installed Triton is not affected, as the table must say."""
    x = torch.arange(1.0, 6.0)
    out = torch.zeros(5)
    _prefix_sums[(1,)](x, out, 5)
    torch.testing.assert_close(out, torch.cumsum(x, 0))
    if tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 4):
        assert not INTERPRETER_NUMPY_2_4.affects(), f"Triton {installed_triton()} ran the loop on numpy {np.__version__}"
