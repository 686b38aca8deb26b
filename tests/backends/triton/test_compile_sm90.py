"""Every kernel variant the Triton backend can launch, compiled for the H200 (sm_90) on the CPU.

Catches what the interpreter accepts and the GPU compiler does not (dots under 16,
non-power-of-two aranges, shared memory past the 227 KiB a block may use) and register spills
inside the tile loops, read off the SASS. ``KNOWN_LOOP_SPILLS`` (read from loop_spills_sm90.json)
lists, per Triton release, the variants that spill today (fp32 at D >= 128: correct, slower;
16-bit variants whose spills were measured to cost less than the configuration they replaced),
with the count measured when they were listed: the test fails if another variant spills, or a
listed one gets worse. The sanitizing variants (inputs holding an inf or NaN) have their own
list, ``KNOWN_SANITIZE_LOOP_SPILLS``; those of bf16 at D >= 64 with the causal hash and drop flags
are compiled (sm90.variants says why not the others). The counts are measured for Triton 3.6 (torch 2.11's, which the
H200 results were measured with), 3.7 (torch 2.13's, what `make test` installs) and 3.9; on
another release the spill test holds its counts to the nearest measured release below it (as
versions.py does for defects): a compiler that spills more fails until its table is added. The test also fails
when a compiler pass drops the segment loop's skip of tiles the previous segment visited (see
kernels._tiles and versions.CARRIED_SCALAR_FOLDED), and when the gathered tile loads of the
16-bit kernels are not software-pipelined (cp.async). The index-building kernels (index.py)
must compile without in-loop spills too. CI checks the bf16 variants the benchmarks time and
the index kernels (about 4 minutes of one core cold); the fp16, fp32 and sanitizing variants are
marked ``slow`` (``make test-compile-all`` runs every variant, one compile process per core, and
writes every report to sm90_reports.json: a session whose kernel sources and Triton match the
file's takes the reports from it, any other compiles them; compile_cache.py).
Triton caches builds under build/triton-cache; the SASS, 0.4 s of disassembly a kernel, is read
only where a kernel has a stack frame to spill to.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tilesparse.backends.triton.sm90 import (
    DROP_CAUSAL,
    HASH_CAUSAL,
    SHARED_LIMIT,
    index_name,
    index_variants,
    variants,
)
from tilesparse.backends.triton.versions import installed_triton, nearest_measured

from compile_cache import compiled  # this folder, on sys.path under pytest

# loop_spills_sm90.json: Triton release -> "unchanged" and "sanitizing" variants -> rows
# [kernel, dtype, head dim, gqa, count], the most in-loop LDL/STL over a key's flag variants; a
# causal drop pattern's variants at D >= 128 (16-bit: the QKDrop rows the benchmarks time) are
# keyed [kernel, dtype, head dim, gqa, "drop", count], added on 2026-12-01 with the counts of that
# day, so that the hash variants keep theirs. Each release's rows are the output of
#   TRITON_INTERPRET=0 python -m tilesparse.backends.triton.sm90 --spill-tables
# with that release installed: every variant of sm90.variants() compiled for sm_90 by Triton's
# own ptxas, its SASS read by sm90._loop_spills (LDL/STL between a backward branch's target and
# the branch), the variants with none left out. Triton 3.6 was measured on 2026-11-30 (its
# counts were the basis of the tile configurations); 3.7.1 on 2026-12-01, from the same kernels,
# for CI (no GPU has run 3.7: its counts catch a regression, they say nothing of speed); 3.9.0
# (the newest release; torch 2.15's) on 2026-12-01 from the kernels with the GQA group as a
# runtime argument (no GPU has run it either).
#
# Triton 3.6: each listed 16-bit variant spills a little inside its loops yet runs
# faster on the H200 than the spill-free configuration it replaced (kernels alone, the
# sweep_kernels_h200.json rows): D=64 dQ with 64-key tiles 1.37 vs 1.72 ms (QKDrop(0.7),
# B=2, H=12, T=16,384); D=128 with 4 warps (B=1, H=32, Hkv=8, T=16,384, QKDrop(0.7)): forward
# 2.62 vs 4.29 ms, dQ 3.35 vs 4.84, dK/dV 4.95 vs 13.45; D=256 with 4 warps and 32x32 backward
# tiles: forward+backward 42.5 vs 119.6 ms (dense, T=32,768). fp32 at D >= 128 spills heavily:
# correct, slower, and not what the benchmarks time. The D=128 forward and dK/dV counts rose by
# 3 and 1 when the unchanged variants began checking their output tiles for an inf or NaN
# (kernels._flag_nonfinite; bench_models_targets_flag2_h200.json times them); fp32 dK/dV at
# D=256 by 5 with the key-length argument (Tq <= Tk).
#
# The sanitizing variants (SANITIZE=True: launched only when the inputs hold an inf or NaN,
# see backends/triton/nonfinite.py) read k, v, q and dO through a finiteness test in the masked
# tiles and may spill: correct, slower, and never on the path of finite inputs, whose variants
# are held to the counts they had before the sanitizing variants existed.
#
# Triton 3.7.1: the unchanged variants that spill are those that spill with 3.6, the counts
# moving both ways (3.6's rows keep the counts from when each variant was listed; measured
# again on 2026-12-01, 3.6 gives each of them at or below its entry); fp32 dK/dV at D=256 rose
# by 152 and 77 when the GQA group became a runtime argument (not a timed path), and fp32 dQ at
# D=256 by 33 (of 11,401) when the forward and dQ kernels' query-block prologue became one
# helper (kernels._query_block; every other variant compiled to the same registers, stack and
# spills; not a timed path). Among the sanitizing variants, the fp16 forward and the fp32 dK/dV
# at D=64 spill a little where 3.6's do not. When the 16-bit D=128 forward began taking 32-wide
# key tiles in groups with a bucket predicate (TileConfig.bucket_fwd_n, 2026-12-01: 8-19% faster
# there, sweep_kernels_h200.json round 4), 3.7.1's rows for that forward were measured again: 51 in-loop
# spills became none, 292 in its sanitizing variant 31; with 3.6 (64 -> none, 307 -> 27) and
# 3.9.0 (36 -> none, 314 -> 24) likewise, and 3.8.0 compiles it without one (sanitizing: 17-30).
# When the 16-bit D=128 dK/dV kernel of drop groups began issuing dP's product before the
# exponentials (TileConfig.dp_first, 2026-12-01: that kernel 6-7% faster, sweep_kernels_h200.json
# round 8), its "drop" rows were measured again and lowered: 3.6 84 -> 50 (sanitizing 550 -> 289),
# 3.7.1 62 -> 38 (529 / 539 -> 295 / 293), 3.9.0 159 -> 143 (409 / 403 -> 381).
# Rows keyed "long" (added the same day) are the 16-bit D=128 hash variants that long bucket
# segments run in three loops, dK/dV with dP first (TileConfig.long_segment_rows): with 3.6 the
# forward has no in-loop spill, dQ 22 and dK/dV 63, and Hash(16) at T=32k ran 8-10% faster
# that way than in one masked loop without them (kernels alone, sweep_kernels_h200.json round 9).
# The D=64 "long" rows came with the same rule at D=64 (dP after; 2026-12-02): Hash(16) at T=32k
# 8% faster in three loops (kernels alone, B=2 H=12, sweep_kernels_h200.json round 10).
# Rows keyed "local" (2026-12-07) are the forwards at D <= 64 that sanitize in their own launch
# (nonfinite.py; launched on calls of at most 4,096 keys): their counts hold the sanitizing
# loops behind the branch that finite inputs do not take. Per loop with 3.6, bf16 D=64: the tile
# loops have no spill, the segment loop 3-6, the sanitizing loops the rest (32-64 and a few);
# the long (three-loop) variants count 70 (3.6), 41 (3.7.1) and 142 (3.9.0). On the GPU its
# kernels take 0.5-9% longer than the pair's two at every length (run 191): it is launched only
# where the launch it saves weighs more (nonfinite.LOCAL_MAX_KEYS).
# With the programs started longest first (TileConfig.heavy_first, kernels._scheduled; 2026-12-07:
# a 4k forward+backward's kernels up to 25% shorter, run 194) every release was measured again;
# five kinds of row rose and were raised, none on a timed path but the long dQ: 3.6 the D=128
# drop forward (the Triton one, which the warp-specialized forward replaces on Hopper) 87 -> 90;
# 3.7.1 the D=64 long dQ 124 -> 128 (Hash(16) at 32k, not timed with the change) and its
# sanitizing forward 32 -> 33; 3.9.0 the D=256 GQA drop dK/dV 142 -> 146 and the fp16 D=64 local
# forward 10 -> 37 (behind its sanitizing branch). Others fell (3.6's D=64 dQ 34 -> 12, 3.7.1's
# D=128 dK/dV 38 -> 32, its warp-specialized D=64 dK/dV 9 -> 0); their rows keep their counts.
SPILL_TABLES = Path(__file__).with_name("loop_spills_sm90.json")


def _spill_tables(kind: str) -> dict[tuple[int, ...], dict[tuple, int]]:
    """One kind ("unchanged", "sanitizing") of loop_spills_sm90.json: release -> table key
    (sm90.Variant.table_key) -> the most in-loop spills measured."""
    releases = json.loads(SPILL_TABLES.read_text())
    return {
        tuple(int(x) for x in release.split(".")): {
            (kernel, getattr(torch, dtype), *rest): n for kernel, dtype, *rest, n in tables[kind]
        }
        for release, tables in releases.items()
    }


KNOWN_LOOP_SPILLS = _spill_tables("unchanged")
KNOWN_SANITIZE_LOOP_SPILLS = _spill_tables("sanitizing")

VARIANTS = variants()


def _in_ci(v) -> bool:
    """The variants CI compiles: the 16-bit ones the benchmarks time (bf16, every kernel, flag set
    and head dim; unchanged, not sanitizing). The others (fp16, fp32, sanitizing: about 300 s of
    one core cold, 60% of the compile) are marked ``slow`` and left to ``make test-compile-all``."""
    return v.dtype == torch.bfloat16 and not v.sanitize


PARAMS = [pytest.param(v, id=str(v), marks=() if _in_ci(v) else pytest.mark.slow) for v in VARIANTS]


@pytest.fixture(scope="module")
def reports(selected_params) -> dict[str, dict]:
    """The variants this session's selected tests read, compiled in a child process (this one
    runs Triton's interpreter; sm90.compile_in_child), or their reports from the last full compile
    of these same sources (compile_cache.py)."""
    wanted = set()
    for params in selected_params:
        if "variant" in params:
            wanted.add(str(params["variant"]))
        if "name" in params:
            wanted.add(index_name(params["name"], params["constexprs"]))
    return compiled(wanted, gluon=False)


@pytest.mark.parametrize("variant", PARAMS)
def test_variant_compiles_for_sm90(variant, reports):
    r = reports.get(str(variant))
    assert r is not None, f"{variant} was not compiled"
    assert r["shared"] <= SHARED_LIMIT, f"{variant}: {r['shared']} bytes of shared memory > {SHARED_LIMIT}"
    assert r["skips_shared_tiles"], f"{variant}: the previous segment's end was folded away: shared tiles run twice"
    if variant.dtype != torch.float32 and variant.head_dim >= 64:
        assert r["async_gathers"] > 0, f"{variant}: gathered K/V (or Q/dO) tile loads are not pipelined"


@pytest.mark.parametrize("variant", PARAMS)
def test_variant_loop_spills(variant, reports):
    tables = KNOWN_SANITIZE_LOOP_SPILLS if variant.sanitize else KNOWN_LOOP_SPILLS
    # a release without a table is held to the nearest measured one below it (versions.py)
    measured = nearest_measured(installed_triton(), tables)
    assert measured is not None, f"no spill table for Triton {installed_triton()} or older (tables: {sorted(tables)})"
    r = reports.get(str(variant))
    assert r is not None, f"{variant} was not compiled"
    known = tables[measured].get(variant.table_key)
    spills = r["loop_spills"]
    if known is None:
        assert spills == 0, f"{variant}: {spills} spill loads/stores inside the tile loops ({r})"
    else:
        assert spills <= known, f"{variant}: {spills} in-loop spills, more than the {known} known"


@pytest.mark.parametrize("name,constexprs", index_variants(), ids=lambda x: x if isinstance(x, str) else None)
def test_index_kernel_compiles_for_sm90(name, constexprs, reports):
    r = reports.get(index_name(name, constexprs))
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


def test_spill_tables_keep_the_worst_flag_variant_per_key():
    """``sm90 --spill-tables`` prints the rows loop_spills_sm90.json holds, ready to paste."""
    from tilesparse.backends.triton.sm90 import spill_tables

    row = dict(kernel="dq", dtype="torch.bfloat16", head_dim=64, gqa=False, sanitize=False)
    rows = [
        {**row, "loop_spills": 3},
        {**row, "loop_spills": 5},
        {**row, "head_dim": 128, "loop_spills": 0},
        {**row, "head_dim": 128, "tag": ["drop"], "loop_spills": 2},
        {**row, "sanitize": True, "loop_spills": 7},
        {"variant": "index _sort_keys {}", "kernel": "_sort_keys", "loop_spills": 0},
    ]
    assert json.loads("{" + spill_tables(rows) + "}")["unchanged"][1] == ["dq", "bfloat16", 128, False, "drop", 2]
    assert spill_tables(rows).splitlines() == [
        '"unchanged": [',
        '  ["dq", "bfloat16", 64, false, 5],',
        '  ["dq", "bfloat16", 128, false, "drop", 2]',
        "],",
        '"sanitizing": [',
        '  ["dq", "bfloat16", 64, false, 7]',
        "]",
    ]


def test_drop_long_and_local_variants_have_their_own_table_keys():
    """QKDrop's flags at D >= 128 (16-bit) are compiled beside the hash flags and held to counts
    of their own, so the hash variants keep theirs; so are the hash variants that long bucket
    segments run in three loops (16-bit D=64 and D=128, the configurations with
    ``long_segment_rows``; dK/dV with dP first at D=128 only, as ``dp_first`` says there), and
    the forwards at D <= 64 with their sanitizing loops in the same launch (nonfinite.py: for
    calls of few keys), whose sanitizing loops count with their tile loops: one for each
    forward at D <= 64."""
    local = [v for v in VARIANTS if v.local]
    paired = [v for v in VARIANTS if v.kernel == "fwd" and v.head_dim <= 64 and not v.local and not v.sanitize]
    assert sorted(map(str, local)) == sorted(str(replace(v, local=True)) for v in paired)
    assert not [v for v in local if v.sanitize]
    assert all(v.table_key == (v.kernel, v.dtype, v.head_dim, v.gqa, *(("long",) if v.long else ()), "local")
               for v in local)
    drop = [v for v in VARIANTS if v.flags == DROP_CAUSAL and v.head_dim >= 128]
    assert {(v.dtype, v.head_dim) for v in drop} == {(t, d) for t in (torch.float16, torch.bfloat16) for d in (128, 256)}
    assert all(v.table_key == (v.kernel, v.dtype, v.head_dim, v.gqa, "drop") for v in drop)
    long = [v for v in VARIANTS if v.long and not v.local]
    expected = {(t, d, HASH_CAUSAL) for t in (torch.float16, torch.bfloat16) for d in (64, 128)}
    assert {(v.dtype, v.head_dim, v.flags) for v in long} == expected
    assert all(v.table_key == (v.kernel, v.dtype, v.head_dim, v.gqa, "long") for v in long)
    assert all(not v.constexprs()["SINGLE_LOOP"] for v in long)
    dkdv = [v for v in long if v.kernel == "dkdv"]
    assert dkdv and all(v.constexprs()["DP_FIRST"] == (v.head_dim == 128) for v in dkdv)
    assert all(len(v.table_key) == 4 for v in VARIANTS if v not in drop and v not in long and v not in local)


def test_candidate_variants_apply_the_override_to_each_kernel():
    """``sm90 --configs`` compiles what a sweep would time: each kernel under the override, for
    the hash and the drop flags, dK/dV also per query head; a field TileConfig lacks is refused."""
    from tilesparse.backends.triton.sm90 import candidate_variants

    vs = candidate_variants(128, torch.bfloat16, {"bwd_warps": 8, "dq_n": 64})
    assert sorted((v.kernel, v.gqa, dict(v.flags)["SAME_BUCKET"]) for v in vs) == sorted(
        (k, g, b) for b in (True, False) for k, g in (("fwd", False), ("dq", False), ("dkdv", False), ("dkdv", True))
    )
    assert {(v.cfg.bwd_warps, v.cfg.dq_n, v.cfg.fwd_n) for v in vs} == {(8, 64, 64)}
    assert {v.launch() for v in vs if v.kernel == "dkdv"} == {(8, 3)}
    with pytest.raises(TypeError, match="warp"):
        candidate_variants(128, torch.bfloat16, {"warps": 8})
