"""The autograd function that owns the Triton launches, and the tile configurations.

Configurations live here and only here: :func:`tile_config` picks one per head dim, dtype and
device; ``override_config`` swaps it for tests and benchmark sweeps. Per-step sizes (sequence
length, block counts) are runtime kernel arguments that Triton does not specialize on, so new
decisions every step reuse the compiled kernels.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import Tensor

from ...ir import KEY_SENTINEL, HeadGroup, NotSelf, PreparedGroup, SameBucket
from ..first_order import first_order_only
from ..switch import switched_on
from . import kernels
from .gqa import sum_into_kv_heads
from .launch import Site, kept_args, lean, read
from .nonfinite import LOCAL_MAX_KEYS, launch_pair, merged_sanitize_on, new_flags, split_counters

__all__ = [
    "BoundAttention",
    "Launch",
    "Launches",
    "TileConfig",
    "compiled_kernel_count",
    "dp_first",
    "forward_tile",
    "interpreting",
    "launch_fwd",
    "long_segments",
    "override_config",
    "parse_overrides",
    "single_loop",
    "sparse_attention",
    "tile_config",
    "unsplit_blocks",
    "unsplit_key_blocks",
    "workspace",
    "ws_dkdv",
    "ws_dkdv_reason",
    "ws_dq",
    "ws_dq_reason",
    "ws_fwd",
    "ws_fwd_reason",
]

LOG2E = 1.4426950408889634
assert kernels.KEY_SENTINEL.value == KEY_SENTINEL, "kernel and IR disagree on the key sentinel"


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


@dataclass(frozen=True)
class TileConfig:
    """Tile shapes and launch parameters of the three kernels.

    ``block_q`` is the query block of the forward and dQ kernels and ``block_k`` the key block
    of the dK/dV kernel: the IR's segments are built for them. ``fwd_n``, ``dq_n`` (key tile
    widths) and ``dkdv_m`` (query tile height) are free: ranges are in rows. ``bwd_*`` launch
    the dK/dV kernel and ``dq_*`` the dQ kernel.
    """

    block_q: int
    block_k: int
    fwd_n: int
    dq_n: int
    dkdv_m: int
    fwd_warps: int = 4
    fwd_stages: int = 3
    bwd_warps: int = 4
    bwd_stages: int = 3
    dq_warps: int = 4
    dq_stages: int = 3
    single_loop: int = 0  # 0: masked / unmasked / masked loops per segment; 1: one masked loop
    # per segment in groups with a bucket predicate (short segments); 2: one loop everywhere
    bucket_fwd_n: int = 0  # the forward's key tile width in groups with a bucket predicate (0: fwd_n)
    dp_first: int = 0  # dK/dV: dP's product issued before the probabilities' exponentials, so that
    # they overlap; 0: nowhere, 1: where a group's segments run three loops (the unmasked one is
    # where they overlap), 2: everywhere
    long_segment_rows: int = 0  # with single_loop=1: a bucket group whose mean segment holds at
    # least this many rows (min(Tq, Tk) x keep / buckets) runs three loops after all (0: never)
    ws_dkdv: int = 0  # > 0: dK/dV by the warp-specialized Gluon kernel where it can run
    # (gluon_dkdv.unusable: Hopper, 16-bit, D = 64 or 128, a Triton it was checked on), in groups
    # without a bucket predicate and in those whose mean bucket segment holds at least this many
    # rows; its own tiles (gluon_dkdv.ws_config) replace dkdv_m and the bwd_* launch parameters
    # there. 0: the Triton kernel everywhere
    ws_dq: int = 0  # > 0: dQ (and delta) by the warp-specialized Gluon kernel where it can run
    # (gluon_dq.unusable: Hopper, 16-bit, D = 64 or 128, 128-row query blocks, a Triton it was
    # checked on), by ws_dkdv's rule on bucket segments with this many rows; its own key tiles
    # (gluon_dq.dq_config) replace dq_n and the dq_* launch parameters there. 0: the Triton kernel
    ws_fwd: int = 0  # > 0: the forward by the warp-specialized Gluon kernel where it can run
    # (gluon_fwd.unusable: Hopper, 16-bit, D = 128, 128-row query blocks, a Triton it was checked
    # on), by ws_dkdv's rule on bucket segments with this many rows; its own key tiles
    # (gluon_fwd.fwd_config) replace fwd_n, bucket_fwd_n and the fwd_* launch parameters there.
    # 0: the Triton kernel
    heavy_first: int = 0  # the attention kernels start their programs heads fastest and blocks
    # slowest, the longest blocks (under a causal mask) first (kernels._scheduled): 1 in every
    # group, 2 in groups without a bucket predicate; 0: in the grid's own order everywhere
    fwd_split: int = 0  # > 1: the Triton forward's query blocks split their key tiles into this
    # many windows, one program each (kernels._share_window), in groups that fuse dense heads with
    # sparse ones (PerHead's: its dense heads' causal blocks are the only long ones, and the longest
    # sets the kernel's time) on calls of at most split_programs query blocks in all; a block
    # spanning several windows is merged by its last share. 0: unsplit
    dq_split: int = 0  # the same for the Triton dQ kernel (its shares' partial dQ summed)
    dkdv_split: int = 0  # the same for the Triton dK/dV kernel's key blocks over windows of their
    # query tiles (its shares' partial dK and dV summed)
    split_programs: int = 0  # the most blocks (batch x group heads x blocks) a split launch has
    split_all: int = 0  # 1: split in every group, not only those fusing dense heads (tests, sweeps)

    def forward_tile(self, same_bucket: bool) -> int:
        """The forward kernel's key tile width for a group with (or without) a bucket predicate."""
        return self.bucket_fwd_n if same_bucket and self.bucket_fwd_n else self.fwd_n


_OVERRIDE: dict[str, int] = {}
_VERSION = [0]  # bumped by every override_config entry and exit: a bound call rebinds its launches


def tile_config(head_dim: int, dtype: torch.dtype, device: torch.device) -> TileConfig:
    """The configuration for a head dim, dtype and device (then any active override).

    Chosen by measurement on the H200 (benchmarks/results/sweep_kernels_h200.json); a
    configuration that spills inside its tile loops is kept only where it measured faster, and
    tests compile every variant for sm_90 and hold each to its listed spill count. fp32 runs its dots as tf32x3 (three tf32 products: fp32 accuracy on
    tensor cores), which doubles the tiles' bytes, hence the smaller blocks.
    """
    if device.type == "cpu":
        # the interpreter costs ~10 ms per program x loop step: few, wide tiles; the programs in
        # the order the GPU's D <= 64 configuration starts them (heavy_first), so that every CPU
        # test runs that mapping (test_heavy_first.py holds both orders to the same results)
        cfg = TileConfig(32, 32, 32, 32, 32, 1, 1, 1, 1, 1, 1, heavy_first=1)
    elif dtype == torch.float32:
        cfg = TileConfig(64, 64, 32, 32, 32, fwd_warps=8, fwd_stages=2, bwd_warps=8, bwd_stages=2, dq_warps=8, dq_stages=2)
        if head_dim > 64:
            cfg = TileConfig(32, 32, 32, 16, 16, fwd_warps=4, fwd_stages=2, bwd_warps=4, bwd_stages=2, dq_warps=4, dq_stages=2)
    elif head_dim <= 64:
        # 4 warps beat 8 on the H200 for both passes, 64-key dK/dV blocks beat 128, and 64-key
        # dQ tiles beat 32 (benchmarks/results/probe_sweep_h200.json, sweep_kernels_h200.json);
        # 128-wide forward tiles outside bucket groups were 2-6% faster with Triton 3.6 (round 5)
        # but compile with 100 in-loop spills on Triton 3.9, where nothing timed them: not taken.
        # Bucket segments of 2,048 rows or more run three loops (dP after): at D=64 Hash(16) at
        # 32k 8% faster, at 131k 19% (kernels alone, round 10); from 1,024 rows Hash(16) at 16k was
        # 1-2% slower (round 11, run 118); head dims of 32 or less, not measured, keep one loop
        # dK/dV by the warp-specialized kernel at D=64 (run 113, bench_targets_*_run113_h200.json,
        # kernel times at B=2, H=12, T=16k): QKDrop 0.7 / 0.5 / 0.3 26% / 24% / 16% faster, Hash(16)'s
        # 1,024-row bucket segments 13%, but Hash(64)'s 256-row ones 6% slower: bucket groups take it
        # from 1,024 rows a segment (between 256 and 1,024 not measured)
        # Programs longest first (run 194, ab_heavy_first_run194_h100.json, kernels of a forward+
        # backward at B=1, H=16, T=4,096 and B=2, H=12, T=16,384): at 4k Dense on Triton 24% faster,
        # QKDrop 0.7 / 0.5 25% / 6%, Hash(16), Hash(64), the hybrid 3-6%, PerHead even; at 16k
        # PerHead 14%, QKDrop 0.7 / 0.5 2% / 7%, the bucket patterns 1-6%, Dense on Triton 2% slower.
        # Head dims below 64 not measured
        # The forward and dQ split in 4 where dense heads are fused with sparse ones (run 209,
        # ab_split_run209_h100.json, kernels at B=1, H=16, T=4,096: PerHead(dense_heads=[0],
        # rest=Hash(16)) 393 -> 307 µs a forward+backward; split everywhere, every other pattern
        # 20-36% slower), on calls of at most 1,024 query blocks (16k's 3,072 not measured split);
        # dK/dV's key blocks split in 4 there too (run 210, ab_split_run210_h100.json, the same
        # kernels: 306 -> 257 µs with the forward and dQ split; call by call -31 µs [-40.4, -25.0]
        # a synchronized forward+backward, ab_calls_split_dkdv_perhead_run210b_h100.json)
        cfg = TileConfig(128, 64, 64, 64, 32, fwd_warps=4, fwd_stages=3, bwd_warps=4, bwd_stages=3, single_loop=1,
                         long_segment_rows=2048 if head_dim > 32 else 0, ws_dkdv=1024 if head_dim == 64 else 0,
                         heavy_first=1, fwd_split=4, dq_split=4, dkdv_split=4, split_programs=1024)
    elif head_dim <= 128:
        # 4 warps everywhere, 64-wide forward tiles and 64x64 dK/dV tiles: forward+backward
        # kernels 2x faster than 8 warps with 32-wide tiles (sweep_kernels_h200.json)
        # one masked loop per segment where buckets cut the ranges short: Hash(64) 10% faster,
        # Hash(16) within 1% (sweep_kernels_h200.json, single_loop rows); there 32-wide forward
        # tiles, which compile without the 64-wide ones' in-loop spills: the Hash(16) / Hash(64)
        # forward 9% / 16% faster at T=32k, QKDrop's 23% slower (sweep_kernels_h200.json, round 4)
        # dP first in the dK/dV kernel of groups that run three loops: QKDrop's dK/dV 5-7% faster at
        # T=32k; in one masked loop 4% slower (Hash(16), round 8). Bucket segments of 2,048 rows or
        # more run three loops: Hash(16) at 32k 8-10% faster (kernels, round 9), where Hash(64)'s
        # 512-row segments are 3.5% slower that way and 1,024 rows about even (16k, single_loop rows).
        # With the dK/dV kernel below, D=128 from 1,024 rows: Hash(16)'s kernels at 16k 3-5% faster
        # (round 11, runs 118-119); 512 rows even (round 12, run 120)
        # dK/dV by the warp-specialized kernel at D=128 (run 113, kernel times): QKDrop 0.7 / 0.5 / 0.3
        # 7% / 3-7% / 4-7% faster (B=1, H=32, Hkv=8, T=32k and B=2, H=12, T=16k), Hash(16) 14-15%,
        # Hash(64) 15% (256-row segments, 16k) and 22% (512, 32k): bucket groups from 256 rows a
        # segment (shorter ones not measured)
        # dQ by the warp-specialized kernel at D=128 (run 123, kernel times with its 2-stage shape):
        # QKDrop 0.7 / 0.5 / 0.3 17% / 15% / 10% faster at B=1, H=32, Hkv=8, T=32k, 15% / 16% / 9% at
        # B=2, H=12, T=16k; Hash(16)'s 2,048-row segments (32k) 5%, its 1,024-row ones (16k) even,
        # Hash(64)'s 512 (32k) even and 256 (16k) 4% slower: bucket groups from 1,024 rows. 3 stages
        # were 0-7% faster than 2 in the probe (gluon_dq.dq_config). D=64: 7-27% slower, not taken
        # the forward by the warp-specialized kernel at D=128 (runs 130-131, gluon_fwd.fwd_config: 128-key
        # tiles): QKDrop 0.7 / 0.5 forward 3% / 4% faster at B=1, H=32, Hkv=8, T=32k, 8% / 9% at B=2, H=12,
        # T=16k; Hash(16)'s 2,048-row segments (32k) 4% faster, its 1,024-row ones (16k) 4% slower: bucket
        # groups from 2,048 rows. D=64: the probe was even with the Triton forward (run 116), not taken
        # programs longest first in groups without a bucket predicate (run 194, kernels of a forward+
        # backward at B=1, H=32, Hkv=8, T=4,096 and 16,384): at 4k Dense on Triton 6% faster, QKDrop
        # 0.7 / 0.5 11% / 13%; at 16k QKDrop(0.5) 3% faster, QKDrop(0.7) even, Dense on Triton 3% slower.
        # Not in bucket groups: Hash(64) 3% slower at both lengths, Hash(16) even, the hybrid -2% / +1%
        cfg = TileConfig(128, 64, 64, 32, 64, fwd_warps=4, fwd_stages=3, bwd_warps=4, bwd_stages=3, single_loop=1,
                         bucket_fwd_n=32, dp_first=1, long_segment_rows=1024 if head_dim == 128 else 2048,
                         ws_dkdv=256 if head_dim == 128 else 0, ws_dq=1024 if head_dim == 128 else 0,
                         ws_fwd=2048 if head_dim == 128 else 0, heavy_first=2)
    else:
        # 4 warps and 32x32 backward tiles: 2.8x faster than 8 warps with 16-wide tiles
        cfg = TileConfig(64, 32, 32, 32, 32, fwd_warps=4, fwd_stages=2, bwd_warps=4, bwd_stages=2, dq_warps=4, dq_stages=2,
                         single_loop=1)
    return replace(cfg, **_OVERRIDE) if _OVERRIDE else cfg


@contextlib.contextmanager
def override_config(**fields: int):
    """Use these TileConfig fields for every launch inside the block (tests, sweeps)."""
    bad = set(fields) - set(TileConfig.__dataclass_fields__)
    if bad:
        raise ValueError(f"unknown TileConfig fields {sorted(bad)}; known: {sorted(TileConfig.__dataclass_fields__)}")
    old = dict(_OVERRIDE)
    _OVERRIDE.update(fields)
    _VERSION[0] += 1
    try:
        yield
    finally:
        _OVERRIDE.clear()
        _OVERRIDE.update(old)
        _VERSION[0] += 1


def parse_overrides(text: str) -> list[dict]:
    """A JSON list of TileConfig overrides, given inline or as ``@FILE`` (sweeps, sm90 --configs)."""
    return json.loads(Path(text[1:]).read_text() if text.startswith("@") else text)


def predicate_flags(group: HeadGroup) -> dict:
    """The group's predicates as the kernels' compile-time switches."""
    causal = group.causal
    return dict(
        CAUSAL=causal is not None,
        STRICT=causal is not None and causal.strict,
        SAME_BUCKET=group.has(SameBucket),
        NOT_SELF=group.has(NotSelf),
    )


def segment_rows(g: PreparedGroup) -> float:
    """The mean rows of group ``g``'s bucket segments, min(Tq, Tk) x keep / buckets: from sizes
    and the spec alone, never from the data."""
    return min(g.q_order.shape[-1], g.k_order.shape[-1]) * g.group.keep / max(g.group.buckets, 1)


def long_segments(g: PreparedGroup, cfg: TileConfig) -> bool:
    """Whether group ``g``'s bucket segments are long enough for three loops (``cfg.long_segment_rows``)."""
    return 0 < cfg.long_segment_rows <= segment_rows(g)


def single_loop(cfg: TileConfig, same_bucket: bool, long: bool) -> bool:
    """Whether a group's segments run as one masked loop (``cfg.single_loop``; ``long``: the
    group's segments are long, :func:`long_segments`)."""
    return cfg.single_loop == 2 or (cfg.single_loop == 1 and same_bucket and not long)


def dp_first(cfg: TileConfig, single: bool) -> bool:
    """Whether the dK/dV kernel issues dP first, for a group whose segments run as one loop or not."""
    return cfg.dp_first == 2 or (cfg.dp_first == 1 and not single)


def _flags(g: PreparedGroup, cfg: TileConfig) -> dict:
    flags = predicate_flags(g.group)
    flags["SINGLE_LOOP"] = single_loop(cfg, flags["SAME_BUCKET"], long_segments(g, cfg))
    flags["HEAVY_FIRST"] = heavy_first(cfg, flags["SAME_BUCKET"])
    return flags


def heavy_first(cfg: TileConfig, same_bucket: bool) -> bool:
    """Whether a group's kernels start their longest programs first (``TileConfig.heavy_first``)."""
    return cfg.heavy_first == 1 or (cfg.heavy_first == 2 and not same_bucket)


def forward_tile(group: HeadGroup, cfg: TileConfig) -> int:
    """The forward kernel's key tile width for ``group`` under ``cfg``."""
    return cfg.forward_tile(group.has(SameBucket))


def _block_d(head_dim: int) -> int:
    return max(16, 1 << (head_dim - 1).bit_length())


def _precision(dtype: torch.dtype) -> str:
    # fp32 inputs get fp32-accurate dots (tf32x3); 16-bit inputs ignore this
    return "tf32x3" if dtype == torch.float32 else "tf32"


def launch_key(g: PreparedGroup, q: Tensor, cfg: TileConfig) -> tuple:
    """Everything a launch specializes on (the compile-time constants); decisions, per-step
    sizes and the GQA group are not in it, so they never recompile."""
    return (q.dtype, q.shape[-1], _block_d(q.shape[-1]), cfg, g.q_ranges.shape[3], tuple(sorted(_flags(g, cfg).items())))


@dataclass(frozen=True)
class Launch:
    """One kernel's launch pair (nonfinite.py) as every call of one signature makes it: the
    grid, the scalars after the strides, the compile-time constants, and the warp-specialized
    kernel's launch that stands in for the unchanged variant (None: the Triton kernel), called
    as a :class:`~.launch.Site` is (its Gluon module's ``site``); ``local``: the kernel sanitizes
    in the same launch (nonfinite.py: the forward at D <= 64 on short calls); ``work``: the
    floats of a split kernel's workspace (:func:`workspace`; None: unsplit)."""

    grid: tuple[int, ...]
    scalars: tuple
    constants: dict
    unchanged: Callable | None
    local: bool = False
    work: int | None = None  # a split kernel's workspace, in floats
    sites: dict = field(default_factory=dict, compare=False, repr=False)

    def site(self, kernel, flag: str | None = None) -> Site:
        """This launch's :class:`~.launch.Site` of ``kernel``, with the constant ``flag`` set
        where given (a variant: ``SANITIZE``, ``LOCAL_SANITIZE``); made on first use."""
        key = (id(kernel), flag)  # a kernel hashes in Python; kernels live as long as their module
        site = self.sites.get(key)
        if site is None:
            constants = self.constants if flag is None else {**self.constants, flag: True}
            site = self.sites[key] = Site(lean(kernel), self.grid, constants)
        return site


class Launches:
    """What a call's launches take that its sizes, head group, scale and configuration fix:
    worked out once per call signature (:class:`BoundAttention`), so that a call only
    allocates its outputs, reads its tensors' addresses and strides, and launches. It keeps no
    tensor."""

    def __init__(self, q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, scale: float, cfg: TileConfig, *,
                 mixed: bool = False):
        B, H, T, D = q.shape
        self.mixed = mixed  # the group fuses dense heads with sparse ones (TileConfig.fwd_split)
        Tk = k.shape[2]
        Hg = len(g.heads)
        self.cfg, self.scale = cfg, scale
        self.sizes = (B, H, T, D, Tk, Hg)
        self.k_group, self.v_group = H // k.shape[1], H // v.shape[1]
        self.full = Hg == H
        # one query head per kv head and every head here: each key row is written once, in
        # place; otherwise per-query-head buffers are summed into the kv heads afterwards
        self.direct = self.full and self.k_group == 1 and self.v_group == 1
        # every query head in order: the sum into the kv heads need not read the head map (gqa.py)
        self.in_order = tuple(g.heads) == tuple(range(H))
        self.flags = _flags(g, cfg)
        self.max_seg_q, self.max_seg_k = g.q_ranges.shape[3], g.k_ranges.shape[3]
        self.n_qb, self.n_kb = g.q_ranges.shape[2], g.k_ranges.shape[2]
        self.q_blocks = B * Hg * self.n_qb  # query blocks in all (TileConfig.split_programs, the workspace)
        self.k_blocks = B * Hg * self.n_kb  # and key blocks, dK/dV's
        self.common = dict(HEAD_DIM=D, BLOCK_D=_block_d(D), PRECISION=_precision(q.dtype))
        unchanged = None
        q_grid = (self.n_qb, B * Hg)
        if ws_fwd(cfg, q, g):  # the warp-specialized kernel, then the Triton kernel's sanitizing variant
            from . import gluon_fwd

            site = gluon_fwd.site(q_grid, head_dim=D, max_seg=self.max_seg_q, flags=self.flags)
            unchanged = _without_workspace(site, poison=True)
        constants = dict(**self.common, BLOCK_M=cfg.block_q, BLOCK_N=cfg.forward_tile(self.flags["SAME_BUCKET"]),
                         MAX_SEG=self.max_seg_q, num_warps=cfg.fwd_warps, num_stages=cfg.fwd_stages, **self.flags)
        split = self._shares(cfg.fwd_split, unchanged is None, self.q_blocks)
        self.fwd = Launch(
            (self.n_qb * split, B * Hg), (Hg, T, Tk, self.n_qb, scale * LOG2E, self.k_group, self.v_group),
            _split_constants(constants, split), unchanged,
            # D <= 64: with its sanitizing loops the forward compiles for sm_90 without a spill in
            # its tile loops (16-bit at D=64 with the hash and drop flags, fp32 hash, bf16 D=32);
            # at D=128 they spill. Up to LOCAL_MAX_KEYS keys (and so queries) only: on longer calls
            # its kernel time grows by more than the launch saves (nonfinite.py)
            local=unchanged is None and D <= 64 and Tk <= LOCAL_MAX_KEYS, work=self._work(split),
        )  # fmt: skip
        self.backward = self._backward(q, g)
        # the split counters the call's flags must be followed by (none where nothing splits)
        splits = any(x.work for x in (self.fwd, *self.backward))
        self.counters = split_counters(B * Hg, self.n_qb, self.n_kb) if splits else 0

    def _shares(self, shares: int, triton_kernel: bool, blocks: int) -> int:
        """:func:`_split` of a kernel configured for ``shares`` in this group on this call of
        ``blocks`` blocks in all: the Triton kernel (``triton_kernel``) of a group that fuses
        dense heads, or of any under ``split_all``."""
        cfg = self.cfg
        return _split(shares, cfg, blocks, triton_kernel and (self.mixed or cfg.split_all > 0))

    def _work(self, split: int, keys: bool = False) -> int | None:
        """The workspace of a launch whose blocks split into ``split`` shares (None: 1), in
        floats: a slot a share (kernels._share_slot), the forward's and dQ's query blocks a tile
        and two rows, dK/dV's key blocks (``keys``) two tiles. The blocks' counters follow the
        call's flags (kernels._split_counters)."""
        if split == 1:
            return None
        d = self.common["BLOCK_D"]
        blocks, slot = (self.k_blocks, 2 * self.cfg.block_k * d) if keys else (self.q_blocks, self.cfg.block_q * (d + 2))
        return blocks * split * slot

    @functools.cached_property
    def unsplit(self) -> tuple[Launch, Launch, Launch]:
        """The forward, dQ and dK/dV launches without their splits (:func:`unsplit_blocks`),
        worked out at their first use."""
        def unsplit(launch: Launch, n_blocks: int) -> Launch:
            constants = {n: c for n, c in launch.constants.items() if n != "SPLIT"}
            return replace(launch, grid=(n_blocks, launch.grid[1]), constants=constants, work=None, sites={})

        dq, dkdv = self.backward
        return unsplit(self.fwd, self.n_qb), unsplit(dq, self.n_qb), unsplit(dkdv, self.n_kb)

    def _backward(self, q: Tensor, g: PreparedGroup) -> tuple[Launch, Launch]:
        """The dQ and the dK/dV launches."""
        cfg, flags = self.cfg, self.flags
        B, H, T, D, Tk, Hg = self.sizes
        def scalars(n_blocks: int) -> tuple:
            return (Hg, T, Tk, n_blocks, self.scale * LOG2E, self.scale, self.k_group, self.v_group)

        q_grid, k_grid = (self.n_qb, B * Hg), (self.n_kb, B * Hg)
        unchanged = None
        if ws_dq(cfg, q, g):  # the warp-specialized kernel, then the Triton kernel's sanitizing variant
            from . import gluon_dq

            unchanged = _without_workspace(gluon_dq.site(q_grid, head_dim=D, max_seg=self.max_seg_q, flags=flags))
        split = self._shares(cfg.dq_split, unchanged is None, self.q_blocks)
        dq = Launch(
            (self.n_qb * split, B * Hg), scalars(self.n_qb),
            _split_constants(dict(BLOCK_M=cfg.block_q, BLOCK_N=cfg.dq_n, MAX_SEG=self.max_seg_q,
                                  num_warps=cfg.dq_warps, num_stages=cfg.dq_stages, **self.common, **flags), split),
            unchanged, work=self._work(split),
        )  # fmt: skip
        unchanged = None
        if ws_dkdv(cfg, q, g):  # the warp-specialized kernel, then the Triton kernel's sanitizing variant
            from . import gluon_dkdv

            unchanged = _without_workspace(gluon_dkdv.site(k_grid, head_dim=D, per_query_head=not self.direct,
                                                           max_seg=self.max_seg_k, flags=flags))  # fmt: skip
        split = self._shares(cfg.dkdv_split, unchanged is None, self.k_blocks)
        dkdv = Launch(
            (self.n_kb * split, B * Hg), scalars(self.n_kb),
            _split_constants(dict(DKV_PER_QUERY_HEAD=not self.direct, BLOCK_M=cfg.dkdv_m, BLOCK_N=cfg.block_k,
                                  MAX_SEG=self.max_seg_k, DP_FIRST=dp_first(cfg, flags["SINGLE_LOOP"]),
                                  num_warps=cfg.bwd_warps, num_stages=cfg.bwd_stages, **self.common, **flags), split),
            unchanged, work=self._work(split, keys=True),
        )  # fmt: skip
        return dq, dkdv

    @functools.cached_property
    def sanitize(self) -> Launch:
        """The launch of the backward's two sanitizing variants as one (``merged_sanitize``,
        worked out at its first use): dQ's programs at grid index 0 of the last axis, dK/dV's
        at 1, each with its own tiles; one warp count for both, the larger, and the fewer
        pipeline stages."""
        cfg, flags = self.cfg, self.flags
        B, H, T, D, Tk, Hg = self.sizes
        return Launch(
            (max(self.n_qb, self.n_kb), B * Hg, 2),
            (Hg, T, Tk, self.n_qb, self.n_kb, self.scale * LOG2E, self.scale, self.k_group, self.v_group),
            dict(DQ_M=cfg.block_q, DQ_N=cfg.dq_n, MAX_SEG_Q=self.max_seg_q, DKDV_M=cfg.dkdv_m, DKDV_N=cfg.block_k,
                 MAX_SEG_K=self.max_seg_k, DKV_PER_QUERY_HEAD=not self.direct,
                 DP_FIRST=dp_first(cfg, flags["SINGLE_LOOP"]), num_warps=max(cfg.dq_warps, cfg.bwd_warps),
                 num_stages=min(cfg.dq_stages, cfg.bwd_stages), **self.common, **flags),
            None,
        )  # fmt: skip


class BoundAttention:
    """The Triton attend step of one head group bound to a call signature: the tile
    configuration and each prepared shape's :class:`Launches`, made on first use and made again
    when :func:`override_config` changes the configuration."""

    def __init__(self, group: HeadGroup, head_dim: int, dtype: torch.dtype, device: torch.device, *,
                 mixed: bool = False):
        self.group, self.mixed = group, mixed
        self.key = (head_dim, dtype, device)
        self.version = -1
        self.cfg: TileConfig | None = None
        self.launches: dict[tuple, Launches] = {}

    def config(self) -> TileConfig:
        """The tile configuration in force (the one :func:`tile_config` gives)."""
        if self.version != _VERSION[0]:
            self.cfg = tile_config(*self.key)
            self.launches.clear()
            self.version = _VERSION[0]
        return self.cfg

    def __call__(
        self, q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, scale: float, poison: Tensor | None = None
    ) -> Tensor:
        """The group's output; ``poison``: the call's (decision_errors.poisoned), folded into its
        output and lse (None: none)."""
        if g.group is not self.group and g.group != self.group:
            raise ValueError(f"bound to head group {self.group.describe()}, given one of {g.group.describe()}")
        cfg = self.config()
        shape = (q.shape, k.shape, v.shape, g.q_ranges.shape, g.k_ranges.shape, g.block_q, g.block_k, g.heads, scale)
        launches = self.launches.get(shape)
        if launches is None:
            if cfg.block_q != g.block_q or cfg.block_k != g.block_k:
                raise ValueError(
                    f"prepared for blocks ({g.block_q}, {g.block_k}) but the triton config uses "
                    f"({cfg.block_q}, {cfg.block_k}); prepare with backend.blocks(inputs)"
                )
            if len(self.launches) >= _BOUND_SHAPES:
                self.launches.clear()
            launches = self.launches[shape] = Launches(q, k, v, g, scale, cfg, mixed=self.mixed)
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return _SparseAttention.apply(q, k, v, g, launches, poison)
        return _forward(q, k, v, g, launches, poison)[0]  # no gradient to take: no autograd node


_BOUND_SHAPES = 16  # launches kept per bound step (a plan binds each exact size once)


def sparse_attention(q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, scale: float, cfg: TileConfig) -> Tensor:
    """(B, Hg, Tq, D) attention of group ``g``'s heads; q (B, H, Tq, D), k (B, Hk, Tk, D) and
    v (B, Hv, Tk, D) with H a multiple of Hk and Hv, Tq <= Tk; differentiable w.r.t. q, k, v."""
    return _SparseAttention.apply(q, k, v, g, Launches(q, k, v, g, scale, cfg), None)


def launch_fwd(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, g: PreparedGroup, scale: float, cfg: TileConfig,
    nonfinite: Tensor | None = None,
) -> None:
    """The forward kernel's launch pair (nonfinite.py): O (B, Hg, Tq, D) and LSE (B, Hg, Tq)
    of group ``g``; ``nonfinite``: the pass's zeroed flag (a new one when not given)."""
    launches = Launches(q, k, v, g, scale, cfg)
    if nonfinite is None:
        nonfinite = new_flags(q.device, launches.counters)[0]
    elif launches.fwd.work is not None:
        raise ValueError("nonfinite: a split forward counts its blocks in the counters after the call's flags "
                         "(nonfinite.new_flags); pass None for flags of its own")
    _launch_fwd(q, k, v, o, lse, g, launches.fwd, nonfinite)


def _launch_fwd(
    q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, g: PreparedGroup, fwd: Launch, nonfinite: Tensor,
    poison: Tensor | None = None,
) -> None:
    """The forward's launches; ``poison`` (None: none) folded into the stored O and lse: by the
    Triton kernel itself, or after the warp-specialized one, which takes none, by two products."""
    folded = poison if fwd.unchanged is None else None
    work = _work_tensor(fwd, lse)
    launch_pair(
        kernels._attn_fwd, fwd, (q, k, v, o, lse, work), _index_args(g, True, nonfinite),
        (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *fwd.scalars, folded),
    )  # fmt: skip
    if poison is not None and folded is None:
        o.mul_(poison)
        lse.mul_(poison)


def _index_args(g: PreparedGroup, query_ranges: bool | None, flag: Tensor) -> tuple:
    """The attention kernels' arguments from ``g`` (orders, positions and buckets of both sides,
    the query side's ranges and segment counts or the key side's, or with ``query_ranges`` None
    both sides', the merged sanitizing launch's; the head map) and the pass's non-finite
    ``flag``: one launch.Fixed read once per kept group where the build keeps ``g``'s tensors
    and ``flag`` is one of its flags (``g.fixed_args``), else the tensors themselves."""
    flags = g.flags or (None, None)
    which = 0 if flag is flags[0] else 1 if flag is flags[1] else None
    kept = g.fixed_args if which is not None else None
    return kept_args(kept, (query_ranges, which), lambda: _index_tensors(g, query_ranges, flag))


def _index_tensors(g: PreparedGroup, query_ranges: bool | None, flag: Tensor) -> tuple:
    if query_ranges is None:
        ranges = (g.q_ranges, g.q_nseg, g.k_ranges, g.k_nseg)
    else:
        ranges = (g.q_ranges, g.q_nseg) if query_ranges else (g.k_ranges, g.k_nseg)
    return (g.q_order, g.q_pos, g.q_bucket, g.k_order, g.k_pos, g.k_bucket, *ranges, g.head_map, flag)


def _without_workspace(site: Site, *, poison: bool = False) -> Callable:
    """``site`` of a Gluon kernel taking the Triton kernel's runtime arguments but its workspace
    (the last tensor: the Gluon kernels do not split) and, with ``poison``, the poison (the
    forward's last scalar: the op multiplies its outputs by it itself), called as a site;
    returns the reading of all the tensors, for the Triton kernel's sanitizing launch after it."""
    last = -1 if poison else None

    def call(tensors: tuple, rest: tuple, scalars: tuple, reading: tuple | None = None) -> tuple | None:
        if reading is None:
            reading = read(tensors)  # all of them, once: the site takes all but the last of it
        site(tensors[:-1], rest, scalars[:last], None if reading is None else (reading[0][:-1], reading[1][:-1]))
        return reading

    return call


def _split(shares: int, cfg: TileConfig, blocks: int, splits: bool) -> int:
    """How many shares a block of a Triton kernel configured for ``shares``
    (``TileConfig.fwd_split``, ``dq_split``, ``dkdv_split``) splits into on a call of ``blocks``
    of its blocks in all (batch x group heads x blocks); 1: unsplit, and where ``splits`` is False
    (a warp-specialized kernel, or a group that fuses no dense heads without ``split_all``)."""
    return shares if splits and shares > 1 and blocks <= cfg.split_programs else 1


def _split_constants(constants: dict, split: int) -> dict:
    return {**constants, "SPLIT": split} if split > 1 else constants


_UNSPLIT = [False]  # unsplit_blocks() in force
_UNSPLIT_KEYS = [False]  # unsplit_key_blocks() in force


def unsplit_blocks():
    """Inside the block the Triton forward, dQ and dK/dV kernels run unsplit where their
    configuration splits them (``TileConfig.fwd_split``, ``dq_split``, ``dkdv_split``): A/B
    timing (``call_times.py --ab split``) and tests."""
    return switched_on(_UNSPLIT)


def unsplit_key_blocks():
    """Inside the block the dK/dV kernel alone runs unsplit where its configuration splits it
    (``TileConfig.dkdv_split``): A/B timing (``call_times.py --ab split-dkdv``) and tests."""
    return switched_on(_UNSPLIT_KEYS)


def _in_force(launches: Launches, i: int) -> Launch:
    """The forward's (``i`` 0), dQ's (1) or dK/dV's (2) launch as a call makes it: unsplit
    inside :func:`unsplit_blocks` (dK/dV's also inside :func:`unsplit_key_blocks`)."""
    launch = launches.backward[i - 1] if i else launches.fwd
    off = _UNSPLIT[0] or (i == 2 and _UNSPLIT_KEYS[0])
    return launches.unsplit[i] if off and launch.work is not None else launch


def _work_tensor(launch: Launch, unread: Tensor) -> Tensor:
    """The workspace ``launch`` takes: a new one where it splits, else ``unread`` (any tensor:
    an unsplit kernel does not read it)."""
    return unread if launch.work is None else workspace(unread.device, launch.work)


def workspace(device: torch.device, floats: int) -> Tensor:
    """A split kernel's fp32 workspace on ``device``, its shares' slots, a new one a launch
    (written before it is read: no fill). Not kept from call to call: a kept one would be a live
    allocation that torch.compile's CUDA graphs refuse when its warm-up made it, and shared
    between streams or captured graphs it would need their order. The blocks' counters, which
    must be zero, follow the call's flags (kernels._split_counters), which a call has anyway."""
    return torch.empty(floats, dtype=torch.float32, device=device)


def _forward(
    q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, launches: Launches, poison: Tensor | None = None,
    with_delta: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """O, LSE, the backward pass's zeroed flag of group ``g`` (nonfinite.py) and, with
    ``with_delta``, the backward's delta buffer, allocated with the LSE as one tensor (an
    allocation fewer a backward), else None; ``poison``: the call's, folded into O and LSE
    (None: none)."""
    B, H, T, D, Tk, Hg = launches.sizes
    o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=q.device)
    if with_delta:
        lse, delta = torch.empty((2, B, Hg, T), dtype=torch.float32, device=q.device).unbind()
    else:
        lse, delta = torch.empty((B, Hg, T), dtype=torch.float32, device=q.device), None
    # zeroed by the group's build where it wrote them (its split counters after them), else a
    # fill of their own
    forward_flag, backward_flag = g.flags or new_flags(q.device, launches.counters)
    _launch_fwd(q, k, v, o, lse, g, _in_force(launches, 0), forward_flag, poison)
    return o, lse, backward_flag, delta


class _SparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, launches: Launches, poison: Tensor | None):
        o, lse, ctx.backward_flag, ctx.delta = _forward(q, k, v, g, launches, poison, with_delta=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.g, ctx.launches = g, launches
        return o

    @staticmethod
    def backward(ctx, do: Tensor):
        q, k, v, o, lse = ctx.saved_tensors
        g, launches = ctx.g, ctx.launches
        B, H, T, D, Tk, Hg = launches.sizes
        dq_launch, dkdv_launch = _in_force(launches, 1), _in_force(launches, 2)
        do = do.contiguous()

        delta = ctx.delta  # written by the dQ kernel; allocated with the forward's lse
        # the pass's flag, zeroed by the forward: set by the unchanged dQ or dK/dV variant (nonfinite.py)
        nonfinite = ctx.backward_flag

        dq = torch.empty_like(q) if launches.full else torch.zeros_like(q)
        merged = merged_sanitize_on()  # both sanitizing variants in one launch, after the unchanged ones
        launch_pair(
            kernels._attn_bwd_dq, dq_launch, (q, k, v, o, do, dq, lse, delta, _work_tensor(dq_launch, lse)),
            _index_args(g, True, nonfinite),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *do.stride()[:3], *dq.stride()[:3],
             *dq_launch.scalars), sanitize=not merged,
        )  # fmt: skip

        if launches.direct:
            dk, dv = torch.empty_like(k), torch.empty_like(v)
        else:  # per query head, one allocation for both
            dk, dv = torch.empty((2, B, Hg, Tk, D), dtype=torch.float32, device=q.device).unbind()
        launch_pair(
            kernels._attn_bwd_dkdv, dkdv_launch, (q, k, v, do, dk, dv, lse, delta, _work_tensor(dkdv_launch, lse)),
            _index_args(g, False, nonfinite),
            (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3],
             *dkdv_launch.scalars), sanitize=not merged,
        )  # fmt: skip
        if merged:
            s = launches.sanitize
            s.site(kernels._attn_bwd_sanitize)(
                (q, k, v, o, do, dq, dk, dv, lse, delta), _index_args(g, None, nonfinite),
                (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *do.stride()[:3],
                 *dq.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], *s.scalars),
            )  # fmt: skip
        if not launches.direct:  # separate tensors: the op's backward may not return outputs that alias each other
            dk, dv = sum_into_kv_heads(dk, dv, g.head_map, H, k, v, in_order=launches.in_order)
        dq, dk, dv = first_order_only("triton", (dq, dk, dv), (q, k, v))
        return dq, dk, dv, None, None, None


def ws_dkdv(cfg: TileConfig, q: Tensor, g: PreparedGroup | None = None) -> bool:
    """Whether dK/dV of a call on ``q`` runs the warp-specialized Gluon kernel (gluon_dkdv.py):
    on this device and configuration, and for group ``g`` where given (``cfg.ws_dkdv``'s rule
    on bucket segments)."""
    return _takes(cfg.ws_dkdv, g) and ws_dkdv_reason(q, cfg) is None


def ws_dq(cfg: TileConfig, q: Tensor, g: PreparedGroup | None = None) -> bool:
    """Whether dQ of a call on ``q`` runs the warp-specialized Gluon kernel (gluon_dq.py), by
    :func:`ws_dkdv`'s rule on ``cfg.ws_dq``."""
    return _takes(cfg.ws_dq, g) and ws_dq_reason(q, cfg) is None


def ws_fwd(cfg: TileConfig, q: Tensor, g: PreparedGroup | None = None) -> bool:
    """Whether the forward of a call on ``q`` runs the warp-specialized Gluon kernel (gluon_fwd.py),
    by :func:`ws_dkdv`'s rule on ``cfg.ws_fwd``."""
    return _takes(cfg.ws_fwd, g) and ws_fwd_reason(q, cfg) is None


def _takes(rows: int, g: PreparedGroup | None) -> bool:
    """A Gluon kernel's rule (``TileConfig.ws_dkdv``, ``ws_dq``, ``ws_fwd``): on (``rows`` > 0), and for group
    ``g`` where given, in a group without a bucket predicate or with bucket segments of ``rows``
    rows or more."""
    return rows > 0 and (g is None or not g.group.has(SameBucket) or segment_rows(g) >= rows)


def ws_dkdv_reason(q: Tensor, cfg: TileConfig) -> str | None:
    """Why the warp-specialized dK/dV kernel does not run for a call on ``q`` (None: it does)."""
    reason = _gluon_reason(q, cfg.ws_dkdv)
    if reason is None:
        from . import gluon_dkdv  # imports Triton's Gluon: only where a Gluon kernel can run

        reason = gluon_dkdv.unusable(q, cfg.block_k)
    return reason


def ws_dq_reason(q: Tensor, cfg: TileConfig) -> str | None:
    """Why the warp-specialized dQ kernel does not run for a call on ``q`` (None: it does)."""
    reason = _gluon_reason(q, cfg.ws_dq)
    if reason is None:
        from . import gluon_dq

        reason = gluon_dq.unusable(q, cfg.block_q)
    return reason


def ws_fwd_reason(q: Tensor, cfg: TileConfig) -> str | None:
    """Why the warp-specialized forward kernel does not run for a call on ``q`` (None: it does)."""
    reason = _gluon_reason(q, cfg.ws_fwd)
    if reason is None:
        from . import gluon_fwd

        reason = gluon_fwd.unusable(q, cfg.block_q)
    return reason


def _gluon_reason(q: Tensor, rows: int) -> str | None:
    """What keeps every Gluon kernel of a call on ``q`` from running, before the kernel's own
    reasons: the interpreter, the device, and its configuration field ``rows`` (0: off)."""
    if interpreting():
        return "Gluon kernels do not run under TRITON_INTERPRET=1"
    if q.device.type != "cuda":
        return "not on a CUDA device"
    if not rows:
        return "off in the tile configuration of this head dim and dtype"
    return None


def compiled_kernel_count() -> int:
    """How many kernel binaries Triton has compiled in this process (0 in the interpreter):
    flat across calls with fresh decisions, or something recompiles every step."""
    total = 0
    fns = [kernels._attn_fwd, kernels._attn_bwd_dq, kernels._attn_bwd_dkdv]
    gluon = sys.modules.get(f"{__package__}.gluon_dkdv")  # imported where its kernel can run
    if gluon is not None:
        fns.append(gluon._attn_bwd_dkdv_ws)
    gluon_dq = sys.modules.get(f"{__package__}.gluon_dq")
    if gluon_dq is not None:
        fns.append(gluon_dq._attn_bwd_dq_ws)
    gluon_fwd = sys.modules.get(f"{__package__}.gluon_fwd")
    if gluon_fwd is not None:
        fns.append(gluon_fwd._attn_fwd_ws)
    for fn in fns:
        for cache in getattr(fn, "device_caches", {}).values():
            total += len(cache[0])
    return total
