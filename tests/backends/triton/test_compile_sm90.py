"""Every kernel variant the Triton backend can launch, compiled for the H200 (sm_90) on the CPU.

Catches what the interpreter accepts and the GPU compiler does not (dots under 16,
non-power-of-two aranges, shared memory past the 227 KiB a block may use) and register spills
inside the tile loops, read off the SASS. ``KNOWN_LOOP_SPILLS`` lists the variants that spill
today (fp32 at D >= 128: correct, slower; the 4-warp D <= 64 forward: a few, and measured
faster), with the count measured when they were listed: the test fails if another variant
spills, or a listed one gets worse. It also fails when a
compiler pass drops the segment loop's skip of tiles the previous segment visited (Triton 3.6
does that to a loop-carried scalar; see kernels._tiles), and when the gathered tile loads of
the 16-bit kernels are not software-pipelined (cp.async). The index-building kernels
(index.py) must compile without in-loop spills too. ~2.5 minutes on 2 cores (Triton caches builds under build/triton-cache).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tilesparse.backends.triton.sm90 import SHARED_LIMIT, index_variants, variants

# (kernel, dtype, head dim, gqa) -> most in-loop LDL/STL over its flag variants, measured on
# 2026-11-29 (triton 3.6). D <= 64, 16-bit: the 4-warp tiles spill a few registers inside the
# loop yet ran faster on the H200 than the spill-free 8-warp ones (forward 0.36 vs 0.59 ms,
# fwd+bwd kernels 1.56 vs 1.84 ms, Hash(16), T=16,384: benchmarks/results/probe_h200.json).
KNOWN_LOOP_SPILLS = {
    ("fwd", torch.bfloat16, 64, False): 3,
    ("fwd", torch.float32, 128, False): 14,
    ("dq", torch.float32, 128, False): 295,
    ("dkdv", torch.float32, 128, False): 322,
    ("dkdv", torch.float32, 128, True): 322,
    ("fwd", torch.float32, 256, False): 834,
    ("dq", torch.float32, 256, False): 11445,
    ("dkdv", torch.float32, 256, False): 15090,
    ("dkdv", torch.float32, 256, True): 15090,
}

VARIANTS = variants()


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    """Compile every variant in a child process: this one runs Triton's interpreter, whose
    kernels cannot be compiled."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    cmd = [sys.executable, "-m", "tilesparse.backends.triton.sm90"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, f"compiling for sm_90 failed:\n{done.stderr[-4000:]}"
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["variant"]: r for r in rows}


@pytest.mark.parametrize("variant", VARIANTS, ids=str)
def test_variant_compiles_for_sm90(variant, reports):
    r = reports.get(str(variant))
    assert r is not None, f"{variant} was not compiled"
    assert r["shared"] <= SHARED_LIMIT, f"{variant}: {r['shared']} bytes of shared memory > {SHARED_LIMIT}"
    known = KNOWN_LOOP_SPILLS.get((variant.kernel, variant.dtype, variant.head_dim, variant.gqa))
    spills = r["loop_spills"]
    if known is None:
        assert spills == 0, f"{variant}: {spills} spill loads/stores inside the tile loops ({r})"
    else:
        assert spills <= known, f"{variant}: {spills} in-loop spills, more than the {known} known"
    assert r["skips_shared_tiles"], f"{variant}: the previous segment's end was folded away: shared tiles run twice"
    if variant.dtype != torch.float32 and variant.head_dim >= 64:
        assert r["async_gathers"] > 0, f"{variant}: gathered K/V (or Q/dO) tile loads are not pipelined"


@pytest.mark.parametrize("name,constexprs", index_variants(), ids=lambda x: x if isinstance(x, str) else None)
def test_index_kernel_compiles_for_sm90(name, constexprs, reports):
    r = reports.get(f"index {name} {constexprs}")
    assert r is not None, f"index kernel {name} {constexprs} was not compiled"
    assert r["shared"] <= SHARED_LIMIT, f"{name} {constexprs}: {r['shared']} bytes of shared memory > {SHARED_LIMIT}"
    assert r["loop_spills"] == 0, f"{name} {constexprs}: {r['loop_spills']} spill loads/stores inside loops ({r})"


def test_loop_spill_reader_sees_spills():
    """The SASS reader counts local-memory traffic inside loops and nothing outside them."""
    from tilesparse.backends.triton.sm90 import _loop_spills

    sass = "\n".join(
        [
            "        /*0010*/                   STL [R1+0x4], R2 ;",
            "        /*0020*/                   LDL R3, [R1+0x4] ;",
            "        /*0030*/                   STL [R1+0x8], R3 ;",
            "        /*0040*/              @P0 BRA 0x20 ;",
            "        /*0050*/                   LDL R4, [R1+0x8] ;",
        ]
    )
    assert _loop_spills(sass) == 2
