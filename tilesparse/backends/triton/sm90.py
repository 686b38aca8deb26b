"""Compile the kernels for the H200 (sm_90) without a GPU, and read what ptxas made of them.

The interpreter accepts programs the GPU compiler rejects (dots under 16, non-power-of-two
aranges) and says nothing of shared memory or registers. :func:`compile_variant` builds a
cubin with the ptxas bundled in Triton; :func:`report` reads its shared memory, registers,
stack frame, and the local-memory loads and stores (spills) *inside loops* of the SASS, the
ones that cost time on every tile. :func:`variants` lists every launch the backend can make.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ...ir import KEY_SENTINEL, QUERY_SENTINEL
from . import kernels
from .launch import OPTIONS
from .op import TileConfig, _block_d, _precision, dp_first, heavy_first, parse_overrides, single_loop, tile_config

__all__ = [
    "SHARED_LIMIT",
    "Report",
    "Variant",
    "compile_gluon_dkdv",
    "compile_gluon_dq",
    "compile_index_kernel",
    "candidate_variants",
    "compile_variant",
    "gluon_dkdv_variants",
    "gluon_dq_variant_name",
    "gluon_dq_variants",
    "gluon_variant_name",
    "index_variants",
    "report",
    "variants",
]

SHARED_LIMIT = 232_448  # bytes of shared memory a block may use on sm_90

_DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
_TENSORS = ("Q", "K", "V", "O", "DO", "DQ", "DK", "DV")


# the flags of a causal hash and of a causal drop pattern (QKDrop: no bucket predicate)
HASH_CAUSAL = (("CAUSAL", True), ("STRICT", False), ("SAME_BUCKET", True), ("NOT_SELF", False))
DROP_CAUSAL = (("CAUSAL", True), ("STRICT", False), ("SAME_BUCKET", False), ("NOT_SELF", False))


@dataclass(frozen=True)
class Variant:
    """One kernel launch shape: which kernel, dtype, head dim, flags and tile config."""

    kernel: str  # "fwd" | "dq" | "dkdv" | "bwd_sanitize" (both sanitizing variants: nonfinite.merged_sanitize)
    dtype: torch.dtype
    head_dim: int
    flags: tuple[tuple[str, bool], ...]
    cfg: TileConfig
    gqa: bool = False
    sanitize: bool = False  # the variant launched when the inputs hold an inf or NaN (nonfinite.py)
    long: bool = False  # a bucket group with long segments (op.long_segments: three loops)
    local: bool = False  # the forward with its sanitizing loops in the same launch (nonfinite.LOCAL_MAX_KEYS)
    poison: bool = False  # the forward folding given ids' poison into its stores (POISON a pointer, not None)
    split: bool = False  # the forward's or dQ's blocks split over windows of their key tiles, dK/dV's over windows
    # of their query tiles (TileConfig.fwd_split, dq_split, dkdv_split)

    def constexprs(self) -> dict:
        c = dict(HEAD_DIM=self.head_dim, BLOCK_D=_block_d(self.head_dim))
        c.update(PRECISION=_precision(self.dtype), **dict(self.flags))
        c["SINGLE_LOOP"] = single_loop(self.cfg, c["SAME_BUCKET"], self.long)
        c["HEAVY_FIRST"] = heavy_first(self.cfg, c["SAME_BUCKET"])
        if self.kernel == "bwd_sanitize":
            return c | dict(DQ_M=self.cfg.block_q, DQ_N=self.cfg.dq_n, MAX_SEG_Q=16, DKDV_M=self.cfg.dkdv_m,
                            DKDV_N=self.cfg.block_k, MAX_SEG_K=16, DKV_PER_QUERY_HEAD=self.gqa,
                            DP_FIRST=dp_first(self.cfg, c["SINGLE_LOOP"]))
        c.update(MAX_SEG=16, SANITIZE=self.sanitize)
        if self.kernel == "fwd":
            c.update(BLOCK_M=self.cfg.block_q, BLOCK_N=self.cfg.forward_tile(c["SAME_BUCKET"]))
            c["LOCAL_SANITIZE"] = self.local
            if not self.poison:
                c["POISON"] = None
        elif self.kernel == "dq":
            c.update(BLOCK_M=self.cfg.block_q, BLOCK_N=self.cfg.dq_n, STORE_DELTA=True)
        else:
            c.update(BLOCK_M=self.cfg.dkdv_m, BLOCK_N=self.cfg.block_k, DKV_PER_QUERY_HEAD=self.gqa,
                     DP_FIRST=dp_first(self.cfg, c["SINGLE_LOOP"]))
        c["SPLIT"] = self.split_shares if self.split else 1
        return c

    @property
    def split_shares(self) -> int:
        """The shares its configuration splits this kernel's blocks into (``TileConfig.fwd_split``,
        ``dq_split``, ``dkdv_split``)."""
        return getattr(self.cfg, f"{self.kernel}_split", 0)  # the merged sanitizing launch: none

    @property
    def drop(self) -> bool:
        """A drop pattern's variant at D >= 128, which the spill tables list apart (the hash
        variants keep their counts)."""
        return self.head_dim >= 128 and self.flags == DROP_CAUSAL

    @property
    def table_key(self) -> tuple:
        """The compile test's spill-table key: (kernel, dtype, head dim, gqa), and "drop" or
        "long", then "local" (the forward's sanitizing loops in its own launch count with its
        tile loops); a ``split`` kernel shares its unsplit twin's key."""
        tag = ("drop",) if self.drop else ("long",) if self.long else ()
        tag += ("local",) if self.local else ()  # a split kernel is held to its unsplit twin's count
        return (self.kernel, self.dtype, self.head_dim, self.gqa) + tag

    def launch(self) -> tuple[int, int]:
        if self.kernel == "fwd":
            return self.cfg.fwd_warps, self.cfg.fwd_stages
        if self.kernel == "dq":
            return self.cfg.dq_warps, self.cfg.dq_stages
        if self.kernel == "bwd_sanitize":  # as op.Launches.sanitize launches it
            return max(self.cfg.dq_warps, self.cfg.bwd_warps), min(self.cfg.dq_stages, self.cfg.bwd_stages)
        return self.cfg.bwd_warps, self.cfg.bwd_stages

    def __str__(self) -> str:
        on = ",".join(k for k, v in self.flags if v) or "-"
        extra = (" gqa" if self.gqa else "") + (" long" if self.long else "") + (" sanitize" if self.sanitize else "")
        extra += (" local" if self.local else "") + (" poison" if self.poison else "") + (" split" if self.split else "")
        return f"{self.kernel} {_DTYPES[self.dtype]} D={self.head_dim} {on}{extra} {self.cfg}"


@dataclass(frozen=True)
class Report:
    """What ptxas made of one variant."""

    shared: int
    registers: int
    stack: int
    loop_spills: int  # LDL/STL instructions inside a loop of the SASS
    skips_shared_tiles: bool  # the segment loop still reads the previous segment's end
    async_gathers: int  # gathered K/V/Q/dO tile loads the pipeliner turned into cp.async

    @property
    def ok(self) -> bool:
        return self.shared <= SHARED_LIMIT and self.loop_spills == 0 and self.skips_shared_tiles


_JIT = {"fwd": "_attn_fwd", "dq": "_attn_bwd_dq", "dkdv": "_attn_bwd_dkdv", "bwd_sanitize": "_attn_bwd_sanitize"}


def _signature(fn, dtype: str, constexprs: dict) -> dict[str, str]:
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name in _TENSORS:
            sig[name] = f"*{dtype}"
        elif name in ("LSE", "DELTA", "POISON", "WORK"):
            sig[name] = "*fp32"
        elif name.isupper():
            sig[name] = "*i32"
        elif name in ("qk_scale", "sm_scale"):
            sig[name] = "fp32"
        else:
            sig[name] = "i32"
    return sig


def compile_variant(v: Variant):
    """Compile ``v`` for sm_90 with Triton's own toolchain; returns Triton's compiled kernel."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.environ.setdefault("TRITON_CACHE_DIR", str(Path(__file__).resolve().parents[3] / "build" / "triton-cache"))
    fn = getattr(kernels, _JIT[v.kernel])
    fn = getattr(fn, "fn", fn) if not hasattr(fn, "arg_names") else fn
    const = v.constexprs()
    warps, stages = v.launch()
    sig = _signature(fn, _DTYPES[v.dtype], const)
    # strides are multiples of 16 elements when D is; per-step sizes are do_not_specialize
    src = ASTSource(fn, sig, const, _divisible(fn, sig, strides=v.head_dim % 16 == 0))
    options = dict(num_warps=warps, num_stages=stages, **OPTIONS)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _divisible(fn, sig: dict[str, str], strides: bool) -> dict:
    """What a launch specializes on, as compile attributes: 16-byte aligned tensors and, where
    ``strides``, strides that are multiples of 16 elements."""
    return {
        (i,): [["tt.divisibility", 16]]
        for i, name in enumerate(fn.arg_names)
        if sig[name].startswith("*") or (strides and name.startswith("stride_"))
    }


def _cuobjdump() -> str:
    import triton

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


def report(compiled) -> Report:
    """Shared memory, registers, stack and in-loop spills of a compiled kernel."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()

        def dump(flag: str) -> str:
            return subprocess.run([_cuobjdump(), flag, f.name], capture_output=True, text=True, check=True).stdout

        usage = dump("-res-usage")
        regs = int(re.search(r"REG:(\d+)", usage).group(1))
        stack = int(re.search(r"STACK:(\d+)", usage).group(1))
        # spills are loads and stores of the stack frame: without one there are none, and the SASS
        # (0.4 s of disassembly a kernel, most of a cached compile's time) is read only with one
        sass = dump("-sass") if stack else ""
    ttgir = compiled.asm["ttgir"]
    # the dedup must survive every pass (see kernels._tiles): lo = max(lo, previous segment's hi)
    dedup = re.search(r"arith\.maxsi %lo\w*, %prev_hi", ttgir) is not None
    gathers = len(re.findall(r"%(?:kT|v|vT|k|qT|q|do|x)(?:_\d+)? = ttg\.async_copy_global_to_local", ttgir))
    return Report(
        shared=compiled.metadata.shared,
        registers=regs,
        stack=stack,
        loop_spills=_loop_spills(sass),
        skips_shared_tiles=dedup,
        async_gathers=gathers,
    )



def _loop_spills(sass: str) -> int:
    """LDL/STL instructions between a backward branch's target and the branch itself."""
    insts = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line)
        if m:
            insts.append((int(m.group(1), 16), m.group(2)))
    loops = []
    for addr, text in insts:
        b = re.search(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)", text)
        if b and int(b.group(1), 16) < addr:
            loops.append((int(b.group(1), 16), addr))
    return sum(
        1
        for addr, text in insts
        if re.search(r"\b(LDL|STL)\b", text) and any(lo <= addr <= hi for lo, hi in loops)
    )


def variants(head_dims=(16, 64, 128, 256), dtypes=(torch.float16, torch.bfloat16, torch.float32)) -> list[Variant]:
    """Every kernel variant the backend launches on a GPU for these head dims and dtypes:
    each kernel for each flag combination the IR can produce (bf16, D=64), and each kernel
    for every (dtype, head dim) with the hash-causal flags (16-bit at D >= 128: the
    drop-causal ones too, QKDrop's timed path; where a configuration runs long bucket segments
    in three loops, the hash-causal ones that way too, ``long``); each forward at D <= 64 also
    with its sanitizing loops in the same launch (``local``: how it is launched for at most
    ``nonfinite.LOCAL_MAX_KEYS`` keys); then the sanitizing variant (``sanitize``, launched
    only for inputs holding an inf or NaN) of each bf16 one at D >= 64 with the hash- or
    drop-causal flags but the local forwards, which hold theirs; the bf16 D=64 hash forwards
    (local, unchanged, sanitizing) again with a poison to fold (``poison``: given ids checked
    on the device, kernels._poisoned); and the 16-bit hash- and drop-causal forwards of every
    configuration that splits short calls, and its dQ and dK/dV kernels, split (``split``). The sanitizing variants left
    out differ from those in what the unchanged variants compile: fp16's from bf16's in the
    products' type, the other flag combinations in the predicates, D=16 in the tile shapes,
    fp32 in the precision. They made up 69 of the 97 sanitizing variants and about a third of
    CI's compile time."""
    cuda = torch.device("cuda")
    combos = [
        dict(CAUSAL=c, STRICT=s, SAME_BUCKET=b, NOT_SELF=n)
        for c in (True, False)
        for s in (True, False)
        for b in (True, False)
        for n in (True, False)
        if not (s and not c) and not (n and c)  # strict only with causal; NotSelf folds into it
    ]
    out = []
    for flags in combos:
        for kernel in ("fwd", "dq", "dkdv"):
            cfg = tile_config(64, torch.bfloat16, cuda)
            out.append(Variant(kernel, torch.bfloat16, 64, tuple(flags.items()), cfg))
    for dtype in dtypes:
        for d in head_dims:
            cfg = tile_config(d, dtype, cuda)
            # the drop flags too where the benchmarks time QKDrop (16-bit, D >= 128)
            flag_sets = (HASH_CAUSAL, DROP_CAUSAL) if dtype != torch.float32 and d >= 128 else (HASH_CAUSAL,)
            out += _kernels(dtype, d, flag_sets, cfg)
            if cfg.single_loop == 1 and cfg.long_segment_rows:  # long bucket segments run three loops
                out += [replace(v, long=True) for v in _kernels(dtype, d, (HASH_CAUSAL,), cfg)]
    out += [replace(v, local=True) for v in out if v.kernel == "fwd" and v.head_dim <= 64]
    out += [replace(v, sanitize=True) for v in out  # a local forward holds its sanitizing loops itself
            if v.dtype == torch.bfloat16 and v.head_dim >= 64 and v.flags in (HASH_CAUSAL, DROP_CAUSAL) and not v.local]
    # the bf16 D=64 hash forwards (in one launch, the pair's two) folding a poison: held to their own counts
    out += [replace(v, poison=True) for v in out
            if v.kernel == "fwd" and v.dtype == torch.bfloat16 and v.head_dim == 64 and v.flags == HASH_CAUSAL
            and not v.long]
    # the 16-bit forwards, dQ and dK/dV kernels whose configuration splits short calls (TileConfig.fwd_split,
    # dq_split, dkdv_split), as those launch them: each variant of the hash- and drop-causal flags, local, paired
    # and sanitizing, with and without a poison
    out += [replace(v, split=True) for v in out
            if v.dtype != torch.float32 and not v.long and v.flags in (HASH_CAUSAL, DROP_CAUSAL)
            and v.kernel != "bwd_sanitize" and v.split_shares > 1]
    return list(dict.fromkeys(out))


def candidate_variants(head_dim: int, dtype: torch.dtype, override: dict) -> list[Variant]:
    """Each kernel at one head dim and dtype under ``tile_config`` with ``override`` applied
    (TileConfig fields), for a causal hash and a causal drop pattern, dK/dV also per query head
    (grouped-query attention): the variants a tile-configuration sweep would time."""
    cfg = replace(tile_config(head_dim, dtype, torch.device("cuda")), **override)
    return _kernels(dtype, head_dim, (HASH_CAUSAL, DROP_CAUSAL), cfg)


def _kernels(dtype: torch.dtype, head_dim: int, flag_sets, cfg: TileConfig) -> list[Variant]:
    """Per flag set: the forward, dQ and dK/dV kernels, and dK/dV per query head (GQA)."""
    return [
        Variant(kernel, dtype, head_dim, flags, cfg, gqa=gqa)
        for flags in flag_sets
        for kernel, gqa in (("fwd", False), ("dq", False), ("dkdv", False), ("dkdv", True))
    ]


def gluon_dkdv_variants() -> list[tuple[torch.dtype, int, tuple[tuple[str, bool], ...], bool, bool]]:
    """The warp-specialized dK/dV kernel's launches (gluon_dkdv.py) as (dtype, head dim, flags,
    per query head, single loop): every flag combination the IR can produce at bf16, D=64, in
    one loop and three; at D=128 (bf16 and fp16) and fp16 D=64 the hash-causal flags both ways
    and the drop-causal ones in three loops; each into the kv heads and per query head."""
    out = [(torch.bfloat16, 64, f, gqa, single) for f in _flag_combos() for single in (True, False)
           for gqa in (False, True)]  # fmt: skip
    for dtype, d in ((torch.bfloat16, 128), (torch.float16, 128), (torch.float16, 64)):
        for flags, single in ((HASH_CAUSAL, True), (HASH_CAUSAL, False), (DROP_CAUSAL, False)):
            out += [(dtype, d, flags, gqa, single) for gqa in (False, True)]
    return out


def gluon_dq_variants() -> list[tuple[torch.dtype, int, tuple[tuple[str, bool], ...], bool]]:
    """The warp-specialized dQ kernel's launches (gluon_dq.py) as (dtype, head dim, flags, single
    loop): every flag combination the IR can produce at bf16, D=128 (where the backend takes it),
    in one loop; the hash-causal and drop-causal flags in three loops there; fp16 D=128 and bf16
    D=64 (taken only when a configuration override asks) with the drop-causal flags in three
    loops and, at D=64, the hash-causal ones in one. The variants differ from each other only in
    their predicates, loop shape, products' type and tile widths, which these cover."""
    out = [(torch.bfloat16, 128, f, True) for f in _flag_combos()]
    out += [(torch.bfloat16, 128, HASH_CAUSAL, False), (torch.bfloat16, 128, DROP_CAUSAL, False),
            (torch.float16, 128, DROP_CAUSAL, False), (torch.bfloat16, 64, DROP_CAUSAL, False),
            (torch.bfloat16, 64, HASH_CAUSAL, True)]  # fmt: skip
    return out


def gluon_fwd_variants() -> list[tuple[torch.dtype, int, tuple[tuple[str, bool], ...], bool]]:
    """The warp-specialized forward kernel's launches (gluon_fwd.py) as (dtype, head dim, flags,
    single loop): every flag combination the IR can produce at bf16, D=128 (where the backend
    takes it), in one loop; the hash-causal and drop-causal flags in three loops there, and fp16
    with the drop-causal ones."""
    out = [(torch.bfloat16, 128, f, True) for f in _flag_combos()]
    out += [(torch.bfloat16, 128, HASH_CAUSAL, False), (torch.bfloat16, 128, DROP_CAUSAL, False),
            (torch.float16, 128, DROP_CAUSAL, False)]  # fmt: skip
    return out


def _flag_combos() -> list[tuple[tuple[str, bool], ...]]:
    """Every predicate flag set the IR can produce (strict only with causal; not-self only without)."""
    return [
        (("CAUSAL", c), ("STRICT", s), ("SAME_BUCKET", b), ("NOT_SELF", n))
        for c in (True, False)
        for s in (True, False)
        for b in (True, False)
        for n in (True, False)
        if not (s and not c) and not (n and c)
    ]


def gluon_variant_name(dtype: torch.dtype, head_dim: int, flags, per_query_head: bool, single_loop: bool) -> str:
    on = ",".join(k for k, v in flags if v) or "-"
    loops = "one loop" if single_loop else "three loops"
    return f"gluon dkdv {_DTYPES[dtype]} D={head_dim} {on}{' gqa' if per_query_head else ''} {loops}"


def gluon_dq_variant_name(dtype: torch.dtype, head_dim: int, flags, single_loop: bool) -> str:
    return gluon_variant_name(dtype, head_dim, flags, False, single_loop).replace("gluon dkdv", "gluon dq", 1)


def gluon_fwd_variant_name(dtype: torch.dtype, head_dim: int, flags, single_loop: bool) -> str:
    return gluon_variant_name(dtype, head_dim, flags, False, single_loop).replace("gluon dkdv", "gluon fwd", 1)


def _compile_gluon(fn, dtype: torch.dtype, launched: dict, fp32: tuple[str, ...] = ()):
    """Compile a Gluon kernel with the constants its launch takes (``launched``: its module's
    ``launch_constants``, ``maxnreg`` an option); ``fp32``: pointers to fp32 buffers."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    os.environ.setdefault("TRITON_CACHE_DIR", str(Path(__file__).resolve().parents[3] / "build" / "triton-cache"))
    const = dict(launched)
    maxnreg = const.pop("maxnreg")
    sig = _signature(fn, _DTYPES[dtype], const)
    for name in fp32:
        sig[name] = "*fp32"
    src = GluonASTSource(fn, sig, const, _divisible(fn, sig, strides=True))
    options = dict(num_warps=4, maxnreg=maxnreg, **OPTIONS)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _gluon_flags(dtype: torch.dtype, head_dim: int, flags, single_loop: bool) -> dict:
    """A Gluon kernel's flags as op._flags gives them to a group under the head dim's own
    configuration: the predicates, ``SINGLE_LOOP`` and ``HEAVY_FIRST`` (op.heavy_first)."""
    flags = dict(flags)
    order = heavy_first(tile_config(head_dim, dtype, torch.device("cuda")), flags["SAME_BUCKET"])
    return {**flags, "SINGLE_LOOP": single_loop, "HEAVY_FIRST": order}


def compile_gluon_dkdv(dtype: torch.dtype, head_dim: int, flags: tuple[tuple[str, bool], ...], per_query_head: bool,
                       single_loop: bool, config=None):
    """Compile the warp-specialized dK/dV kernel for sm_90 (a launch of gluon_dkdv.launch, at
    ``config``, a ``gluon_dkdv.WsConfig``, or the head dim's own)."""
    from . import gluon_dkdv

    const = gluon_dkdv.launch_constants(config or gluon_dkdv.ws_config(head_dim), head_dim, per_query_head, 16,
                                        _gluon_flags(dtype, head_dim, flags, single_loop))
    # per query head: fp32 buffers, summed into the kv heads after
    return _compile_gluon(gluon_dkdv._attn_bwd_dkdv_ws, dtype, const, ("DK", "DV") if per_query_head else ())


def compile_gluon_dq(dtype: torch.dtype, head_dim: int, flags: tuple[tuple[str, bool], ...], single_loop: bool,
                     config=None):
    """Compile the warp-specialized dQ kernel for sm_90 (a launch of gluon_dq.launch, at ``config``,
    a ``gluon_dq.DqConfig``, or the head dim's own)."""
    from . import gluon_dq

    const = gluon_dq.launch_constants(config or gluon_dq.dq_config(head_dim), head_dim, 16,
                                      _gluon_flags(dtype, head_dim, flags, single_loop))
    return _compile_gluon(gluon_dq._attn_bwd_dq_ws, dtype, const)


def compile_gluon_fwd(dtype: torch.dtype, head_dim: int, flags: tuple[tuple[str, bool], ...], single_loop: bool,
                      config=None):
    """Compile the warp-specialized forward kernel for sm_90 (a launch of gluon_fwd.launch, at
    ``config``, a ``gluon_fwd.FwdConfig``, or the head dim's own)."""
    from . import gluon_fwd

    const = gluon_fwd.launch_constants(config or gluon_fwd.fwd_config(head_dim), head_dim, 16,
                                       _gluon_flags(dtype, head_dim, flags, single_loop))
    return _compile_gluon(gluon_fwd._attn_fwd_ws, dtype, const)


def index_variants() -> list[tuple[str, dict]]:
    """The index-building kernels (index.py) as (kernel name, constexprs): every switch and
    category padding from 2 (drop only) to 128 (64 buckets and dropped rows); the ``lsh``
    hashing kernel (hashing.py) and the ``topk_abs`` kernel (topk.py) at D = 64, 128 and 256,
    16-bit and fp32; the given ids' check (idcheck.py: ids' ranges and supports' repeats, one
    or two fields a launch; supports of 2 to 64 ids a token); the GQA gradients' sum (gqa.py);
    and TopKFeatures' q~ and k~ (features.py, a side a launch and both in one) at D = 64, 128 and 256."""
    from . import index
    from .hashing import hash_constexprs

    out = []
    for cat_pad in (2, 4, 32, 128):
        n_cat, block = max(2, cat_pad - 1), index._sort_block(cat_pad)
        for keep, bucket in ((True, False), (False, True), (True, True)):
            out.append(("_sort_keys", dict(HAS_KEEP=keep, HAS_BUCKET=bucket, N_CAT=n_cat, CAT_PAD=cat_pad, BLOCK=block)))
        out.append(("_scan_counts", dict(CAT_PAD=cat_pad, CHUNKS=max(1, index._SCAN_TILE // cat_pad))))
        scatter = dict(N_CAT=n_cat, CAT_PAD=cat_pad, BLOCK=block, BY_SORT=index._by_sort(cat_pad))
        out.append(("_scatter_sorted", dict(**scatter, FUSED_SCAN=False, CHUNKS_PAD=1)))
        if cat_pad <= index._FUSED_SCAN:
            out.append(("_scatter_sorted", dict(**scatter, FUSED_SCAN=True, CHUNKS_PAD=index._FUSED_SCAN // cat_pad)))
        for keep, bucket in ((True, False), (False, True), (True, True)):
            out.append(("_sort_scatter", dict(HAS_KEEP=keep, HAS_BUCKET=bucket, N_CAT=n_cat, CAT_PAD=cat_pad, BLOCK=block,
                                              BY_SORT=index._by_sort(cat_pad), COUNT_BLOCK=index._COUNT_ROWS)))
        if cat_pad == 32:  # a PerHead's dense heads fused into the group: their flag read by the sort's launch
            both = dict(HAS_KEEP=True, HAS_BUCKET=True, N_CAT=n_cat, CAT_PAD=cat_pad, BLOCK=block, HAS_DENSE=True)
            out.append(("_sort_keys", both))
            out.append(("_sort_scatter", dict(**both, BY_SORT=index._by_sort(cat_pad), COUNT_BLOCK=index._COUNT_ROWS)))
    for d, buckets, fp32 in ((64, 15, False), (128, 63, False), (256, 255, False), (128, 63, True)):
        out.append(("_lsh_hash", hash_constexprs(d, buckets, fp32)))
    from .topk import topk_constexprs

    for d, dtype in ((64, torch.bfloat16), (128, torch.bfloat16), (256, torch.bfloat16), (128, torch.float32)):
        out.append(("_topk_abs", topk_constexprs(d, dtype)))
    for causal, strict, not_self, identity in ((True, False, False, False), (True, True, False, True), (False, False, True, False)):
        out.append(("_build_sides", dict(
            Q_SENTINEL=QUERY_SENTINEL, K_SENTINEL=KEY_SENTINEL, Q_DROPPED=-1, K_DROPPED=-2, BLOCK_Q=128, BLOCK_K=64,
            SEG_Q=16, SEG_K=16, CAUSAL=causal, STRICT=strict, NOT_SELF=not_self, IDENTITY=identity,
        )))  # fmt: skip
    from .gqa import _BLOCK

    # the GQA gradients' sum (gqa.py): every query head in order (4 a kv head), or through the head map
    out.append(("_sum_into_kv_heads", dict(BLOCK=_BLOCK, IN_ORDER=True, GROUP_K=4, GROUP_V=4)))
    out.append(("_sum_into_kv_heads", dict(BLOCK=_BLOCK, IN_ORDER=False, GROUP_K=1, GROUP_V=1)))
    from .features import constexprs as feature_constexprs

    for d in (64, 128, 256):  # TopKFeatures' q~, k~ (features.py): a side a launch, and both sides in one
        out += [("_keep_features", feature_constexprs(d)), ("_keep_features_pair", feature_constexprs(d))]
    from .idcheck import BLOCK, MAX_SUPPORT

    # one field or two of one kind (a pattern's two sides), ids (KPAD 1) or supports; a later
    # launch of a call (FIRST false) for the narrowest and the widest
    for kpad in [2**i for i in range(MAX_SUPPORT.bit_length())]:
        for second in (0, kpad):
            out += [("_check_ids", dict(FIRST=True, KPAD0=kpad, KPAD1=second, BLOCK=BLOCK))]
    out += [("_check_ids", dict(FIRST=False, KPAD0=kpad, KPAD1=kpad, BLOCK=BLOCK)) for kpad in (1, MAX_SUPPORT)]
    return out


def compile_index_kernel(name: str, constexprs: dict):
    """Compile one index-building kernel for sm_90 (keep and bucket inputs as a launch gives them)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import features, gqa, hashing, idcheck, index, topk

    os.environ.setdefault("TRITON_CACHE_DIR", str(Path(__file__).resolve().parents[3] / "build" / "triton-cache"))
    modules = {"_lsh_hash": hashing, "_check_ids": idcheck, "_topk_abs": topk, "_sum_into_kv_heads": gqa,
               "_keep_features": features, "_keep_features_pair": features}
    fn = getattr(modules.get(name, index), name)
    # the hashing kernel: q and k in the dtype its PRECISION names (tf32: 16-bit), the rotation fp32;
    # the id check: int64 record, scratch and resets, a float32 poison
    # the topk kernel: q and k in the dtype its WIDTH names; the GQA sum: fp32 in, bf16 out;
    # q~ and k~: bf16
    data = "*bf16" if constexprs.get("PRECISION") == "tf32" or constexprs.get("WIDTH") == 16 else "*fp32"
    inputs = {"Q_KEEP": "*i1", "K_KEEP": "*i1", "Q_BKT": "*i64", "K_BKT": "*i64", "Q": data, "K": data, "ROT": "*fp32",
              "POISON": "*fp32", "lo_init": "i64", "hi_init": "i64", "DK": "*fp32", "DV": "*fp32",
              "OUT_K": "*bf16", "OUT_V": "*bf16", "SRC": "*bf16", "DST": "*bf16", "SRC0": "*bf16", "DST0": "*bf16",
              "SRC1": "*bf16", "DST1": "*bf16"}  # fmt: skip
    inputs |= {f"{row}{i}": "*i64" for row in ("RECORD", "SCRATCH", "RECORD_REP", "SCRATCH_REP") for i in (0, 1)}
    sig = {n: "constexpr" if n in constexprs else inputs.get(n, "*i32" if n.isupper() else "i32") for n in fn.arg_names}
    src = ASTSource(fn, sig, constexprs, _divisible(fn, sig, strides=False))
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=3, **OPTIONS))


def spill_tables(rows: list[dict]) -> str:
    """The variants that spill inside their loops, as one release's entry of
    tests/backends/triton/loop_spills_sm90.json: rows [kernel, dtype, head dim, gqa, count]
    (with :attr:`Variant.table_key`'s tag, a drop pattern's, long segments' or a local
    forward's: [..., gqa, "drop", count]), the count the most in-loop spills over the key's
    flag variants, for the unchanged then the sanitizing variants."""
    out = []
    for sanitize in (False, True):
        most: dict[tuple, int] = {}
        for r in rows:
            if "head_dim" in r and r["sanitize"] == sanitize and r["loop_spills"] > 0:
                key = (r["kernel"], r["dtype"].removeprefix("torch."), r["head_dim"], r["gqa"])
                key += tuple(r.get("tag", ()))
                most[key] = max(most.get(key, 0), r["loop_spills"])
        out.append('"sanitizing": [' if sanitize else '"unchanged": [')
        out.append(",\n".join(f"  {json.dumps([*key, n])}" for key, n in most.items()))
        out.append("]" if sanitize else "],")
    return "\n".join(line for line in out if line)


def index_name(name: str, constexprs: dict) -> str:
    """How main() names an index-building kernel's variant (its JSON line's ``variant``)."""
    return f"index {name} {constexprs}"


# the warp-specialized kernels' variants: kind -> (name of a variant, the variants, compile)
_GLUON = {
    "gluon_dkdv": (gluon_variant_name, gluon_dkdv_variants, compile_gluon_dkdv),
    "gluon_dq": (gluon_dq_variant_name, gluon_dq_variants, compile_gluon_dq),
    "gluon_fwd": (gluon_fwd_variant_name, gluon_fwd_variants, compile_gluon_fwd),
}


def _compile_row(work: tuple) -> dict:
    """One JSON line of main() for a work item (kind, variant name, what compiles it): kind
    ``"variant"`` with a :class:`Variant`, ``"index"`` with (kernel name, constexprs), or a
    Gluon kind of ``_GLUON`` with that kernel's variant tuple."""
    kind, name, item = work
    if kind in _GLUON:
        return dict(variant=name, head_dim=item[1], **report(_GLUON[kind][2](*item)).__dict__)
    if kind == "index":
        return {"variant": name, "kernel": item[0], **report(compile_index_kernel(*item)).__dict__}
    v = item
    return dict(variant=name, kernel=v.kernel, dtype=str(v.dtype), head_dim=v.head_dim, gqa=v.gqa,
                sanitize=v.sanitize, tag=v.table_key[4:], **report(compile_variant(v)).__dict__)  # fmt: skip


@contextlib.contextmanager
def _pool(jobs: int):
    """``map`` over processes (spawned: each imports Triton afresh), or in this one for 1 job."""
    if jobs <= 1:
        yield types.SimpleNamespace(map=map)
        return
    import concurrent.futures
    import multiprocessing

    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


def compile_in_child(names: Iterable[str], *, gluon: bool = False, timeout: float = 1200) -> dict[str, dict]:
    """:func:`main` in a child process for the variants ``names`` (``--gluon``: the
    warp-specialized kernels'): variant name -> its JSON line. A child because a process running
    Triton's interpreter cannot compile kernels; a ``RuntimeError`` with the child's stderr when
    it fails. Compile processes: one per core, shared among pytest-xdist's workers (each of CI's
    two workers gets one: more would only contend for its two cores)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    jobs = max(1, (os.cpu_count() or 1) // workers)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(sorted(names), f)
    cmd = [sys.executable, "-m", __name__, "--only", f.name, "--jobs", str(jobs)] + ["--gluon"] * gluon
    try:
        done = subprocess.run(cmd, env={**os.environ, "TRITON_INTERPRET": "0"}, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(f"compiling for sm_90 failed:\n{done.stderr[-4000:]}")
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["variant"]: r for r in rows}


def main(argv: list[str] | None = None) -> None:
    """Compile every variant (or those ``--only`` names, in ``--jobs`` processes; with ``--gluon``
    the warp-specialized kernels' instead) and print one JSON line per variant (run without the
    interpreter: ``TRITON_INTERPRET=0 python -m tilesparse.backends.triton.sm90``);
    ``--spill-tables`` prints the variants that spill, as the compile test's tables, instead."""
    import argparse

    from .op import interpreting

    parser = argparse.ArgumentParser(prog="python -m tilesparse.backends.triton.sm90", description=main.__doc__)
    parser.add_argument("--spill-tables", action="store_true", help="print the compile test's spill tables")
    parser.add_argument("--configs", metavar="JSON",
                        help="instead: compile each kernel at --head-dim and --dtype under each TileConfig override of "
                             "this JSON list (inline, or @FILE as benchmarks/sweep_kernels.py takes it), for the "
                             "hash and the drop flags, and print one line per variant")  # fmt: skip
    parser.add_argument("--gluon", action="store_true",
                        help="instead: compile the warp-specialized dK/dV, dQ and forward kernels' variants "
                             "(gluon_dkdv_variants, gluon_dq_variants, gluon_fwd_variants)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--dtype", default="bf16", choices=sorted(_DTYPES.values()))
    parser.add_argument("--only", metavar="FILE", help="compile only the variants this JSON list names (str(Variant), "
                        "index_name(...)); every one by default")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="compile in this many processes (default 1)")
    args = parser.parse_args(argv)
    if interpreting():
        raise SystemExit("unset TRITON_INTERPRET: the interpreter cannot compile kernels for the GPU")
    if args.configs:
        dtype = {name: t for t, name in _DTYPES.items()}[args.dtype]
        for override in parse_overrides(args.configs):
            for v in candidate_variants(args.head_dim, dtype, override):
                print(json.dumps(dict(config=override, variant=str(v), **report(compile_variant(v)).__dict__)), flush=True)
        return
    if args.gluon:
        work = [(kind, name(*v), v) for kind, (name, listed, _) in _GLUON.items() for v in listed()]
    else:
        work = [("variant", str(v), v) for v in variants()]
        work += [("index", index_name(n, c), (n, c)) for n, c in index_variants()]
    only = set(json.loads(Path(args.only).read_text())) if args.only else None
    work = [w for w in work if only is None or w[1] in only]
    if only is not None and len(work) != len(only):
        raise SystemExit(f"--only names {len(only) - len(work)} variants this tree does not have")
    rows = []
    with _pool(args.jobs) as pool:
        for row in pool.map(_compile_row, work):
            rows.append(row)
            if args.gluon or not args.spill_tables:
                print(json.dumps(row), flush=True)
    if args.spill_tables and not args.gluon:
        import triton

        print(f"in-loop spills, Triton {triton.__version__}")
        print(spill_tables(rows))


if __name__ == "__main__":
    main()
