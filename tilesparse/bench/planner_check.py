"""Does ``backend="auto"`` pick the fastest backend? Chosen against best, per benchmark row.

Two modes:

- timing (``--grid targets|full|quick``): for every (pattern, D, T, mode) of a benchmark grid
  (``tilesparse.bench.attention.GRIDS``), time every registered backend that can run the
  pattern (forced, ``validate=False``, decisions given) and the automatic plan, and print the
  plan's backends and time next to the fastest; a row passes when the choice is within
  ``--tolerance`` (10%) of the best. The JSON (``--out``) holds ``ms`` per backend and the
  visited fraction per row: ``python -m tilesparse.planner.calibrate`` reads it, so a new
  backend (CuPy) is calibrated by this same run. The reference backend is skipped where its
  (B, H, T, T) float32 scores would exceed ``--reference-max-gib``.
- offline (``--from-results FILE``): for every row of a benchmark engine's JSON, the backend
  the cost model picks at that row's shape against the fastest measured option that computes
  the same (exact) result: for a sparse row only the tile-skipping backend's time exists
  (SDPA cannot run the mask), for a dense row SDPA and any measured Triton row on it.

Timing (CUDA): CUDA events around each call after three warm-up calls, median of ``--reps``
rounds in which every option (each forced backend and the automatic plan) is called once,
interleaved, so clock and host-load drifts hit every option alike; on the CPU,
``time.perf_counter`` (for the tests at the quick grid's sizes). On a CUDA GPU::

    python -m tilesparse.bench.planner_check --grid targets --out planner_check.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

import tilesparse as ts
from tilesparse.backends import REGISTRY
from tilesparse.ir import AttentionInputs, lower, tile_stats
from tilesparse.planner import default_costs, estimate_visited, simplify
from tilesparse.planner.cost import Shape

from .grid import GRIDS, PATTERNS

__all__ = ["check_results", "main", "time_grid"]


def _timer(device: torch.device, reps: int) -> Callable[[dict[str, Callable[[], object]]], dict[str, float]]:
    """Median ms of each callable, timed interleaved: ``reps`` rounds, each calling every
    callable once, so drifts of clock and host load hit every option alike. Not
    ``triton.testing.do_bench``: it times one callable at a time, and the comparison between
    options is what this check is about."""

    def cuda(calls):
        events = {n: [] for n in calls}
        for _ in range(reps):
            for name, fn in calls.items():
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                events[name].append((a, b))
        torch.cuda.synchronize(device)
        return {n: statistics.median(a.elapsed_time(b) for a, b in ev) for n, ev in events.items()}

    def cpu(calls):
        times = {n: [] for n in calls}
        for _ in range(reps):
            for name, fn in calls.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(1e3 * (time.perf_counter() - t0))
        return {n: statistics.median(t) for n, t in times.items()}

    return cuda if device.type == "cuda" else cpu


def _warm(fn: Callable[[], object], device: torch.device) -> None:
    for _ in range(3 if device.type == "cuda" else 1):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _call(attn, q, k, v, dec, grad, mode: str) -> Callable[[], object]:
    if mode == "fwd":
        return lambda: attn(q, k, v, decisions=dec)
    return lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), grad)


def time_row(
    spec, B: int, H: int, T: int, D: int, mode: str, device, *, reps: int, reference_max_gib: float,
    kv_heads: int | None = None,
) -> dict:
    """Every backend that can run ``spec`` at this shape, and the automatic plan, timed
    (``kv_heads``: k and v have that many heads, GQA)."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    g = torch.Generator(device).manual_seed(T * 31 + D)
    Hkv = H if kv_heads is None else kv_heads
    q, grad = (torch.randn((B, H, T, D), generator=g, device=device, dtype=dtype) for _ in range(2))
    k, v = (torch.randn((B, Hkv, T, D), generator=g, device=device, dtype=dtype) for _ in range(2))
    for t in (q, k, v):
        t.requires_grad_(mode == "fwd_bwd")
    timer = _timer(device, reps)
    auto = ts.compile(spec, causal=True, validate=False)
    dec = auto.decide(q, k, generator=g)
    row: dict = {"spec": json.loads(spec.model_dump_json()), "B": B, "H": H, "Hkv": Hkv, "T": T, "D": D,
                 "mode": mode, "ms": {}, "skipped": {}}  # fmt: skip
    calls = {}
    for name in REGISTRY:
        if name == "reference" and B * H * T * T * 4 / 2**30 > reference_max_gib:
            row["skipped"][name] = f"(B, H, T, T) float32 scores exceed {reference_max_gib} GiB"
            continue
        if name == "executor" and device.type == "cuda":
            row["skipped"][name] = "the tile executor is a model for tests (Python loops over tiles)"
            continue
        try:
            attn = ts.compile(spec, causal=True, backend=name, validate=False)
            calls[name] = _call(attn, q, k, v, dec, grad, mode)
            _warm(calls[name], device)
        except ts.NoBackendError as e:
            calls.pop(name, None)
            row["skipped"][name] = str(e).split("\n", 1)[1].strip()
        except Exception as e:  # noqa: BLE001 - a failure is a recorded result
            calls.pop(name, None)
            row["skipped"][name] = f"{type(e).__name__}: {str(e)[:300]}"
    calls["auto"] = _call(auto, q, k, v, dec, grad, mode)
    _warm(calls["auto"], device)
    ms = timer(calls)
    row["ms"] = {n: t for n, t in ms.items() if n != "auto"}
    plan = auto.plan(q, k, v, decisions=dec)
    row["auto"] = {
        "backends": [a.backend.NAME for a in plan.assignments],
        "index_builders": [a.builder.NAME if a.builder else None for a in plan.assignments],
        "ms": ms["auto"],
        "estimated_ms": plan.estimated_ms,
        "estimated": {a.backend.NAME: dict(a.costs) for a in plan.assignments},
    }
    prepared = ts.compile(spec, causal=True, backend="triton" if "triton" in row["ms"] else "reference").prepare(
        q, k, v, decisions=dec
    )
    stats = [tile_stats(pg, exact=False) for pg in prepared.groups]
    row["visited_fraction"] = sum(s["visited"] for s in stats) / max(1, sum(s["dense_tiles"] for s in stats))
    _verdict(row)
    return row


def _verdict(row: dict, tolerance: float = 0.10) -> None:
    options = dict(row["ms"])
    if not options:
        row.update(best=None, within=None, ok=None)
        return
    best = min(options, key=options.get)
    chosen = row["auto"]["ms"]
    row["best"] = best
    row["within"] = chosen / options[best] - 1
    row["ok"] = row["within"] <= tolerance


def time_grid(grid: str, *, device, reps: int, reference_max_gib: float, log=print, on_row=None) -> list[dict]:
    """Every row of the grid timed; ``on_row(rows)`` after each (the JSON is written as it goes)."""
    g = GRIDS[grid]
    rows = []
    for D in g.head_dims:
        for T in g.seqlens:
            for name in g.patterns:
                for mode in ("fwd", "fwd_bwd"):
                    row = time_row(PATTERNS[name].spec, g.batch, g.heads, T, D, mode, device, reps=reps,
                                   reference_max_gib=reference_max_gib, kv_heads=g.kv_heads)  # fmt: skip
                    row["pattern"] = name
                    rows.append(row)
                    log(_line(row))
                    if on_row is not None:
                        on_row(rows)
    return rows


def _line(row: dict) -> str:
    chosen = "+".join(row["auto"]["backends"])
    best = row.get("best")
    best_ms = row["ms"].get(best) if best else None
    best_ms = float("nan") if best_ms is None else best_ms
    verdict = "-" if row.get("ok") is None else ("ok" if row["ok"] else "SLOWER")
    return (
        f"{row.get('pattern', '?'):>8} D={row['D']:>3} T={row['T']:>6} {row['mode']:>7}  "
        f"chosen {chosen:<14} {row['auto']['ms']:9.3f} ms  best {best or '-':<10} {best_ms:9.3f} ms  "
        f"({100 * (row.get('within') or 0):+5.1f}%) {verdict}"
    )


def check_results(path: Path, *, tolerance: float = 0.10, log=print) -> list[dict]:
    """Offline: the cost model's pick for every row of a benchmark JSON against the fastest
    measured exact option (see the module docstring). Reads the benchmark engine's rows (one
    measured backend each) and this check's own timed rows (every capable backend measured),
    so a recalibrated model is checked against the times it was fitted on."""
    data = json.loads(Path(path).read_text())
    meta, costs = data.get("meta", {}), default_costs()
    dtype = getattr(torch, meta.get("dtype", "bfloat16"))
    out = []
    for r in data.get("rows", []):
        if "ours" in r.get("ms", {}):
            # the engine times one backend per row (SDPA's forced flash and cuDNN kernels are
            # not backends the planner can pick: the sdpa backend runs torch's default dispatch)
            measured = {r["backend"]: r["ms"]["ours"]}
        elif "auto" in r and r.get("ms"):
            measured = dict(r["ms"])  # this check's timed row: every capable backend
        else:
            continue
        spec = ts.parse_spec(r["spec"])
        shape = Shape(r["B"], r["H"], r["T"], r["D"], dtype, r["mode"], bool(meta.get("causal", True)))
        priced = _priced(spec, shape, costs)
        chosen = min(priced, key=priced.get)
        best = min(measured, key=measured.get)
        row = {"pattern": r.get("pattern"), "T": r["T"], "D": r["D"], "mode": r["mode"], "chosen": chosen,
               "estimated_ms": priced[chosen], "measured": measured, "best": best,
               "chosen_ms": measured.get(chosen)}  # fmt: skip
        row["ok"] = row["chosen_ms"] is not None and row["chosen_ms"] <= (1 + tolerance) * measured[best]
        out.append(row)
        log(f"{row['pattern'] or '?':>8} D={row['D']:>3} T={row['T']:>6} {row['mode']:>7}  chosen {chosen:<8} "
            f"(est. {priced[chosen]:8.3f} ms)  best measured {best:<8} {measured[best]:8.3f} ms  "
            f"{'ok' if row['ok'] else 'NOT MEASURED' if row['chosen_ms'] is None else 'SLOWER'}")  # fmt: skip
    return out


def _priced(spec, shape: Shape, costs) -> dict[str, float]:
    """The cost model's estimate per CUDA backend that can run every group of ``spec``."""
    priced: dict[str, float] = {}
    refused: set[str] = set()
    for group in lower(spec, causal=shape.causal).groups:
        group, _ = simplify(group, shape.head_dim)
        frac = estimate_visited(group, shape.seqlen)
        # capabilities by the backends' own group checks (device and dtype are the row's)
        for name, entry in costs.devices.get("cuda", {}).items():
            backend = REGISTRY.get(name)
            if backend is not None and not backend._reasons(group, _fake_inputs(shape)):
                priced[name] = priced.get(name, 0.0) + entry.ms(shape, frac)
            else:
                refused.add(name)
    return {n: ms for n, ms in priced.items() if n not in refused}


def _fake_inputs(shape: Shape):
    """Inputs of the row's sizes on the meta device: enough for the group checks (built
    directly: a call's own checks refuse meta tensors, which hold no data)."""
    q = torch.empty((1, 1, shape.seqlen, shape.head_dim), dtype=shape.dtype, device="meta")
    return AttentionInputs(q, q, q, scale=shape.head_dim**-0.5)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tilesparse.bench.planner_check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--grid", choices=sorted(GRIDS), default="targets", help="benchmark grid to time")
    parser.add_argument("--from-results", type=Path, help="offline: check the rows of this benchmark JSON instead")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--reference-max-gib", type=float, default=4.0)
    args = parser.parse_args(argv)
    if args.from_results:
        rows = check_results(args.from_results, tolerance=args.tolerance)
        meta = {"kind": "planner_check_offline", "source": str(args.from_results)}
    else:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        meta = {
            "kind": "planner_check", "grid": args.grid, "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": "bfloat16" if device.type == "cuda" else "float32", "causal": True,
            "torch": torch.__version__, "reps": args.reps, "tolerance": args.tolerance,
        }  # fmt: skip

        def write(rows: list[dict]) -> None:  # as rows come: a run cut short keeps its rows
            for row in rows:
                _verdict(row, args.tolerance)
            if args.out:
                args.out.write_text(json.dumps({"meta": {**meta, "complete": False}, "rows": rows}, indent=1) + "\n")

        rows = time_grid(args.grid, device=device, reps=args.reps, reference_max_gib=args.reference_max_gib, on_row=write)
        write(rows)
        meta["complete"] = True
    bad = [r for r in rows if r.get("ok") is False]
    print(f"{len(rows) - len(bad)} of {len(rows)} rows within {100 * args.tolerance:.0f}% of the best")
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
