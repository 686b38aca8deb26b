"""Time tilesparse against SDPA (flash, cuDNN) and FlexAttention, in one process, on one GPU.

What is timed (bf16, causal, q/k/v (B, H, T, D) leaf tensors with requires_grad; fresh random
inputs for every pattern, never zeros):

- ``fwd``: one call, output discarded (autograd records the graph, as in training);
  ``fwd_bwd``: the call, then ``torch.autograd.grad(out, (q, k, v), grad)`` with a fixed random
  ``grad``.
- ours, decisions excluded (``ours``): ``attn(q, k, v, decisions=dec)``, ``dec`` made once by
  ``attn.decide`` outside the timed region; inside: validation, layout (sort/compaction),
  ranges, kernels. Ours, decisions included (``ours_incl``): ``attn(q, k, v)``, which also
  runs the criteria (LSH hashing, Bernoulli draws) every call. ``decide``: ``attn.decide(q, k)``
  alone; ``prep``: ``attn.prepare(q, k, v, decisions=dec)`` alone (the index tensors), wall
  time; ``prep_gpu``: the GPU time of prepare's kernels (the torch profiler's device times,
  mean of 10 calls); ``kernels``: the attention kernels alone on prepared index tensors
  (Triton rows with one head group). ``prep_gpu_share`` = prep_gpu / ours and
  ``overhead_share`` = (ours - kernels) / ours: what the call adds to the kernels.
  ``attn = ts.compile(spec, causal=True, backend="triton", validate=False)``: ``validate=False``
  skips the value checks of given decisions, which read them back (a device sync); the dense
  row uses ``backend="auto"`` (which sends it to SDPA) and reports the chosen backend.
- ``sdpa_flash`` / ``sdpa_cudnn``: ``F.scaled_dot_product_attention(is_causal=True)`` under
  ``sdpa_kernel(FLASH_ATTENTION)`` / ``sdpa_kernel(CUDNN_ATTENTION)``; one measurement per
  (D, T, mode), shared by that (D, T)'s pattern rows.
- FlexAttention (``torch.compile(flex_attention, dynamic=False)``) on the same mask in its
  best layout: per (b, h), rows stable-sorted by (bucket, position), dropped rows moved to
  the end (compacted, original order kept), q/k/v gathered into that order, a ``mask_mod`` over
  the sorted rows' original positions and buckets (causal on original positions, same bucket,
  dropped rows never match), the output scattered back to the original order. Decisions are
  given (as for ``ours``). ``flex_percall``: layout + ``create_block_mask`` (compiled) + gather
  + flex + scatter inside the timed region (the pattern changes every step);
  ``flex_prebuilt``: layout and block mask built once outside, gather + flex + scatter inside
  (Flex's best case). Its output is checked against ours once per row (``flex_check``).

What is not timed: the first call of every measured function (Triton and torch.compile
compilation, plan building), input creation, ``attn.decide`` for ``ours``, the visited-tile
statistics, the peak-memory call and the checks.

Timing (:mod:`.timing`), on CUDA: one untimed call (compilation), one for peak memory, then
``triton.testing.do_bench`` (``--warmup-ms`` of warm-up, about ``--rep-ms`` of calls but at
least ``--min-reps``, each bracketed by CUDA events after an L2 flush); the median is
reported, p20/p80 under ``spread``. Calls are queued back to back, so host work that the GPU cannot hide (Python,
launches) counts. On CUDA each measurement is also timed synchronized after every call
(``sync_ms``: the median wall time of 5 to 40 calls, what a step that waits for its result
sees; the gap to ``ms`` is host time). On the CPU (``--grid quick`` in CI): ``time.perf_counter``
around each call, median of ``--cpu-reps`` (no ``sync_ms``: every call already waits).

Peak memory: ``torch.cuda.reset_peak_memory_stats()``, one call, ``max_memory_allocated()``
(bytes, everything live included: inputs, grad, decisions); ``live_mib`` is what was
allocated just before the call.

Tiles: ``visited_fraction`` sums, over the prepared head groups, the forward kernel's visited
(query block x forward key tile: ``TileConfig.forward_tile``, which a bucket predicate may
make narrower) area over the dense causal area;
``ideal_fraction`` is the fraction an ideal layout must touch (tiles holding a kept element),
computed exactly on a fresh B=1, H=1 slice for T <= ``--ideal-max-t`` (it costs T^2 work),
next to the visited fraction of that same slice.

Every failure of one measurement (out of memory, unsupported backend) is recorded in its row
under ``errors`` and the run goes on. The JSON is rewritten after every pattern, so a run cut
short keeps what it measured; ``--budget-s`` stops starting new work after that many seconds.

Run: ``python -m tilesparse bench --grid targets --out results.json`` (or
``benchmarks/bench_attention.py``); a PNG lands next to the JSON and a table per mode is printed
last. ``--grid quick`` runs on the CPU (Triton under TRITON_INTERPRET=1, else the reference
backend). Import ``run`` and ``plot`` to drive it from Python.

The harness: :mod:`.grid` (patterns, grids), :mod:`.timing` (one call's time),
:mod:`.measure` (a measurement into a record, failures recorded), :mod:`.schema` (records,
settings, the JSON rows), :mod:`.flex` (FlexAttention's layout), :mod:`.table` (what is
printed), :mod:`.command` (the options); this module runs the grid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.backends.triton.op import TileConfig, forward_tile, interpreting, sparse_attention, tile_config
from tilesparse.ir import tile_stats

from .flex import FlexMask, flex_wanted, run_flex
from .grid import DTYPE, FLEX_DEFAULT_PATTERNS, GRIDS, LONG_D, LONG_PATTERN, LONG_T, MODES, PATTERNS, Grid, Pattern
from .measure import describe, measure, random_inputs, record_failure, step
from .plot import plot
from .schema import Record, Settings, make_row
from .table import log_line, print_table
from .timing import free, gpu_ms

__all__ = ["GRIDS", "PATTERNS", "Grid", "Pattern", "plot", "print_table", "run", "run_pattern", "run_sdpa"]


# ---------------------------------------------------------------------------------------------
# SDPA


def _sdpa(q: Tensor, k: Tensor, v: Tensor, backend) -> Tensor:
    ctx = contextlib.nullcontext() if backend is None else sdpa_kernel(backend)
    with ctx:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def run_sdpa(D: int, T: int, s: Settings, *, modes: Sequence[str], cudnn: bool = True) -> dict[str, Record]:
    """SDPA flash and cuDNN for every mode at (D, T): one measurement shared by the patterns."""
    q, k, v, grad = random_inputs(s.batch, s.heads, T, D, s, f"sdpa/{D}/{T}")
    out: dict[str, Record] = {}
    for mode in modes:
        rec = out[mode] = Record()
        if s.cuda:
            backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION)]
            if cudnn:
                backends.append(("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION))
            for name, backend in backends:
                fwd = lambda b=backend: _sdpa(q, k, v, b)  # noqa: E731
                measure(name, step(fwd, mode, (q, k, v), grad), rec, s)
        else:
            measure("sdpa_flash", step(lambda: _sdpa(q, k, v, None), mode, (q, k, v), grad), rec, s)
            rec.notes["sdpa_flash"] = "cpu: SDPA backend not forced (torch's CPU kernel stands in for flash)"
            rec.skipped["sdpa_cudnn"] = "cpu: no cuDNN backend"
    return out


def forward_tiles(groups, cfg: TileConfig, *, exact: bool = False) -> list[tuple[dict, int]]:
    """Each prepared group's ``tile_stats`` in its own forward key tiles (``forward_tile``: a
    bucket predicate may make them narrower), with that width."""
    tiles = []
    for g in groups:
        n = forward_tile(g.group, cfg)
        tiles.append((tile_stats(g, block_n=n, exact=exact), n))
    return tiles


def tile_area(tiles: list[tuple[dict, int]], key: str) -> int:
    """``key``'s tiles of :func:`forward_tiles`' groups, each counted by its width (key columns
    per query row): comparable across groups of different widths."""
    return sum(st[key] * n for st, n in tiles)


def visited(attn, q: Tensor, k: Tensor, v: Tensor, dec: ts.Decisions, cfg: TileConfig, *, exact: bool) -> dict:
    """Tile counts of the prepared groups, each in its forward key tiles (:func:`forward_tiles`),
    as fractions of the dense causal area."""
    with torch.no_grad():
        prep = attn.prepare(q, k, v, decisions=dec)
        tiles = forward_tiles(prep.groups, cfg, exact=exact)
    dense = max(tile_area(tiles, "dense_tiles"), 1)
    out = {
        "visited_tiles": sum(st["visited"] for st, _ in tiles),
        "dense_tiles": sum(st["dense_tiles"] for st, _ in tiles),
        "visited_fraction": tile_area(tiles, "visited") / dense,
        "block_q": prep.groups[0].block_q if prep.groups else None,
        "block_n": sorted({n for _, n in tiles}),
    }
    if exact:
        out["ideal_fraction"] = tile_area(tiles, "ideal") / dense
        out["missed"] = sum(st["missed"] for st, _ in tiles)
    return out


def kernels_alone(attn, q, k, v, grad, dec, common: Record, per_mode: dict[str, Record], s: Settings) -> None:
    """The attention kernels alone on prepared index tensors (``kernels``, per mode), and the
    GPU time of the preparation's own kernels (``prep_gpu``, from the profiler): what the
    call adds on top of the kernels is host work (Python, launches) and the preparation."""
    try:
        prep = attn.prepare(q, k, v, decisions=dec)
    except Exception as e:  # noqa: BLE001
        common.errors["kernels"] = describe(e)
        return
    if len(prep.groups) != 1:
        common.skipped["kernels"] = f"{len(prep.groups)} head groups (measured for one)"
        return
    g = prep.groups[0]
    cfg = tile_config(q.shape[-1], q.dtype, q.device)
    scale = q.shape[-1] ** -0.5
    for mode, rec in per_mode.items():
        measure("kernels", step(lambda: sparse_attention(q, k, v, g, scale, cfg), mode, (q, k, v), grad), rec, s)
    del prep, g
    if s.cuda:
        try:
            common.ms["prep_gpu"] = gpu_ms(lambda: attn.prepare(q, k, v, decisions=dec), s.device)
        except Exception as e:  # noqa: BLE001
            common.errors["prep_gpu"] = describe(e)




def run_pattern(
    name: str, D: int, T: int, s: Settings, *, modes: Sequence[str], flex_masks: dict, long: bool = False,
) -> tuple[Record, dict[str, Record]]:  # fmt: skip
    """Everything measured for one pattern at (D, T): shared numbers and per-mode numbers."""
    pat = PATTERNS[name]
    common = Record()
    per_mode = {m: Record() for m in modes}
    backend = pat.backend or s.sparse_backend
    attn = ts.compile(pat.spec, causal=True, backend=backend, validate=s.validate, cuda_graphs=s.cuda_graphs)
    q, k, v, grad = random_inputs(s.batch, s.heads, T, D, s, f"{name}/{D}/{T}")
    inputs = (q, k, v)
    try:
        common.info["backend"] = ",".join(a.backend.NAME for a in attn.plan(q, k, v).assignments)
        dec = attn.decide(q, k)
    except Exception as e:  # noqa: BLE001
        del q, k, v, grad, inputs
        record_failure(common, "ours", e, s)
        return common, per_mode
    has_decisions = bool(pat.spec.decision_fields)

    if has_decisions:
        measure("decide", lambda: attn.decide(q, k), common, s, peak=False)
    measure("prep", lambda: attn.prepare(q, k, v, decisions=dec), common, s, peak=False)
    for mode, rec in per_mode.items():
        if s.decide in ("both", "excluded"):
            measure("ours", step(lambda: attn(q, k, v, decisions=dec), mode, inputs, grad), rec, s)
        if s.decide in ("both", "included"):
            if has_decisions:
                measure("ours_incl", step(lambda: attn(q, k, v), mode, inputs, grad), rec, s)
            elif "ours" in rec.ms:
                rec.ms["ours_incl"] = rec.ms["ours"]
                rec.notes["ours_incl"] = "no decisions to make: the same call as ours"

    if backend == "triton":
        kernels_alone(attn, q, k, v, grad, dec, common, per_mode, s)

    cfg = tile_config(D, DTYPE, s.device)
    try:
        common.info.update(visited(attn, q, k, v, dec, cfg, exact=False))
    except Exception as e:  # noqa: BLE001
        record_failure(common, "visited", e, s)

    why_not = "not run on the long row" if long else flex_wanted(name, D, T, s)
    if why_not is None:
        try:
            ours_out = attn(q, k, v, decisions=dec).detach()
        except Exception as e:  # noqa: BLE001
            ours_out = None
            common.errors["flex_check"] = "ours failed: " + describe(e)
        key = (s.batch, s.heads, T)
        if key not in flex_masks:
            flex_masks[key] = FlexMask(s.batch, s.heads, T, s.device)
        run_flex(q, k, v, grad, dec, ours_out, flex_masks[key], common, per_mode, s)
        del ours_out
    else:
        common.skipped["flex"] = why_not

    del q, k, v, grad, dec, inputs
    free(s.device)
    if T <= s.ideal_max_t and not long:
        try:
            q1, k1, v1, _ = random_inputs(1, 1, T, D, s, f"ideal/{name}/{D}/{T}")
            q1, k1, v1 = q1.detach(), k1.detach(), v1.detach()
            st = visited(attn, q1, k1, v1, attn.decide(q1, k1), cfg, exact=True)
            common.info["ideal_fraction"] = st["ideal_fraction"]
            common.info["ideal_slice_visited_fraction"] = st["visited_fraction"]
            common.info["ideal_missed_tiles"] = st["missed"]
        except Exception as e:  # noqa: BLE001
            record_failure(common, "ideal", e, s)
    else:
        common.skipped["ideal"] = f"T > {s.ideal_max_t} (exact tile counts cost T^2 work)" if not long else "long row"
    return common, per_mode


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()})"


def _versions() -> dict:
    out = {"torch": torch.__version__, "python": platform.python_version(), "tilesparse": ts.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    out["cuda"] = torch.version.cuda
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    try:  # an installed copy has no .git
        git = ["git", "-C", str(Path(__file__).resolve().parent)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        out["git_commit"] = head.stdout.strip() or None
        status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, timeout=10)
        out["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = out["git_dirty"] = None
    return out


def _write_json(results: dict, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def _csv(values: Sequence | str | None, cast=int) -> tuple | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [x for x in values.split(",") if x.strip()]
    return tuple(cast(x) if cast is not str else x.strip() for x in values)


def run(
    grid: str = "full",
    *,
    head_dims: Sequence[int] | str | None = None,
    seqlens: Sequence[int] | str | None = None,
    patterns: Sequence[str] | str | None = None,
    batch: int | None = None,
    heads: int | None = None,
    long_row: bool | None = None,
    modes: Sequence[str] = MODES,
    decide: str = "both",
    flex: str = "default",
    flex_patterns: Sequence[str] | str | None = None,
    flex_seqlens: Sequence[int] | str | None = None,
    out: str | Path | None = None,
    png: str | Path | None = None,
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    min_reps: int = 5,
    cpu_reps: int = 3,
    seed: int = 0,
    validate: bool = False,
    cuda_graphs: bool = False,
    budget_s: float | None = None,
    ideal_max_t: int = 16384,
    device: str | torch.device | None = None,
    command: str | None = None,
    log: bool = True,
) -> dict:
    """Run a grid and return ``{"meta": ..., "rows": [...]}``; with ``out``, write the JSON
    there (after every pattern) and the plot to ``png`` (default: ``out`` with .png)."""
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {sorted(GRIDS)}, got {grid!r}")
    g = GRIDS[grid]
    if g.kv_heads is not None:
        raise ValueError(
            f"grid {grid!r} has grouped-query heads, which this engine does not time: "
            "benchmarks/bench_models.py times it (and python -m tilesparse.bench.planner_check --grid models)"
        )
    head_dims = _csv(head_dims) or g.head_dims
    seqlens = _csv(seqlens) or g.seqlens
    patterns = _csv(patterns, str) or g.patterns
    if bad := [p for p in patterns if p not in PATTERNS]:
        raise ValueError(f"unknown patterns {bad}; known: {list(PATTERNS)}")
    modes = _csv(modes, str)
    if bad := [m for m in modes if m not in MODES]:
        raise ValueError(f"unknown modes {bad}; known: {list(MODES)}")
    if decide not in ("both", "excluded", "included"):
        raise ValueError(f"decide must be both, excluded or included, got {decide!r}")
    if flex not in ("all", "default", "none"):
        raise ValueError(f"flex must be all, default or none, got {flex!r}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    long_row = g.long_row if long_row is None else long_row
    sparse_backend = "triton" if device.type == "cuda" or interpreting() else "reference"
    s = Settings(
        device=device, batch=batch or g.batch, heads=heads or g.heads, modes=modes, decide=decide, flex=flex,
        grid=grid, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps, cpu_reps=cpu_reps, seed=seed,
        validate=validate, ideal_max_t=ideal_max_t, sparse_backend=sparse_backend, cuda_graphs=cuda_graphs,
        flex_patterns=_csv(flex_patterns, str) or FLEX_DEFAULT_PATTERNS, flex_seqlens=_csv(flex_seqlens),
    )  # fmt: skip
    out = Path(out) if out is not None else None
    png = Path(png) if png is not None else (out.with_suffix(".png") if out is not None else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)

    meta = {
        "script": "python -m tilesparse bench (tilesparse.bench.attention)",
        "command": command if command is not None else " ".join(["python", *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": _device_name(device),
        "capability": list(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None,
        **_versions(),
        "grid": grid,
        "B": s.batch,
        "H": s.heads,
        "dtype": str(DTYPE).removeprefix("torch."),
        "causal": True,
        "head_dims": list(head_dims),
        "seqlens": list(seqlens),
        "patterns": {p: json.loads(PATTERNS[p].spec.model_dump_json()) for p in patterns},
        "long_row": {"T": LONG_T, "D": LONG_D, "pattern": LONG_PATTERN} if long_row else None,
        "modes": list(modes),
        "decide": decide,
        "flex": flex,
        "flex_patterns": list(s.flex_patterns),
        "flex_seqlens": list(s.flex_seqlens) if s.flex_seqlens else None,
        "flex_compiled": device.type == "cuda",
        "sparse_backend": sparse_backend,
        "triton_interpret": interpreting(),
        "validate": validate,
        "cuda_graphs": cuda_graphs,
        "tile_config": {
            D: dataclasses.asdict(tile_config(D, DTYPE, device))
            for D in sorted({*head_dims, *([LONG_D] if long_row else [])})
        },
        "peak_memory": "max_memory_allocated over one call" if device.type == "cuda" else "cpu: not measured",
        "timing": {
            "method": "triton.testing.do_bench (L2 flushed), median" if s.cuda else "perf_counter, median",
            "warmup_ms": warmup_ms,
            "rep_ms": rep_ms,
            "min_reps": min_reps,
            "cpu_reps": cpu_reps,
        },
        "seed": seed,
        "budget_s": budget_s,
        "doc": __doc__,
    }
    results: dict = {"meta": meta, "rows": []}
    rows = results["rows"]

    work: list[tuple[int, int, tuple[str, ...], bool]] = []
    if long_row:
        work.append((LONG_D, LONG_T, (LONG_PATTERN,), True))
    work += [(D, T, tuple(patterns), False) for D in head_dims for T in seqlens]
    total = sum(len(p) for _, _, p, _ in work)
    t_start = time.perf_counter()
    flex_masks: dict = {}
    console = Console(stderr=True, highlight=False)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not log,
    )  # fmt: skip

    def stop_reason() -> str | None:
        if s.failures.fatal:
            return f"not run: an earlier CUDA error poisoned the context ({s.failures.fatal[:120]})"
        if budget_s is not None and time.perf_counter() - t_start > budget_s:
            return f"not run: the time budget of {budget_s} s was spent"
        return None

    with progress:
        task = progress.add_task("bench", total=total)
        for D, T, pats, long in work:
            row_modes = ("fwd_bwd",) if long else modes
            if why := stop_reason():
                for name in pats:
                    for mode in row_modes:
                        rows.append(make_row(name, D, T, mode, Record(skipped={"all": why}), s, long=long))
                    progress.advance(task)
                continue
            progress.update(task, description=f"D={D} T={T} sdpa")
            try:
                sdpa = run_sdpa(D, T, s, modes=row_modes, cudnn=not long)
            except Exception as e:  # noqa: BLE001 - e.g. out of memory making the inputs
                sdpa = {m: Record() for m in row_modes}
                for rec in sdpa.values():
                    record_failure(rec, "sdpa", e, s)
            free(device)
            for name in pats:
                if why := stop_reason():
                    for mode in row_modes:
                        rec = Record(skipped={"all": why}).merged(sdpa[mode])
                        rows.append(make_row(name, D, T, mode, rec, s, long=long))
                    progress.advance(task)
                    continue
                progress.update(task, description=f"D={D} T={T} {name}")
                try:
                    common, per_mode = run_pattern(name, D, T, s, modes=row_modes, flex_masks=flex_masks, long=long)
                except Exception as e:  # noqa: BLE001
                    common, per_mode = Record(), {m: Record() for m in row_modes}
                    record_failure(common, "pattern", e, s)
                for mode in row_modes:
                    rows.append(make_row(name, D, T, mode, common.merged(per_mode[mode], sdpa[mode]), s, long=long))
                meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
                if out is not None:
                    _write_json(results, out)
                if log:
                    progress.console.print(log_line(rows[-1]))
                progress.advance(task)

    meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    meta["stopped"] = next((r["skipped"]["all"] for r in rows if "all" in r["skipped"]), None)
    if png is not None:
        try:
            meta["png"] = str(plot(results, png))
        except Exception as e:  # noqa: BLE001
            meta["png_error"] = describe(e)
    if out is not None:
        meta["json"] = str(out)
        _write_json(results, out)
    return results
