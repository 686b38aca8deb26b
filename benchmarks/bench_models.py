"""The shapes real models use: whole calls against cuDNN and flash SDPA, with per-pass throughput.

Run on a GPU: ``python3 benchmarks/bench_models.py --out DIR [--shapes B,H,Hkv,D,T;...]
[--patterns ...]``. Default grid: B=1, H=32, Hkv=8 (grouped-query attention), D=128, bf16,
causal, T = 8k, 16k, 32k, 64k, the 8 patterns, forward and forward+backward, decisions given.

Every call is the public op ``attn(q, k, v, decisions=dec)`` (index build, kernels, scatter and
host time included) and is timed two ways: back to back (``triton.testing.do_bench``, median of
CUDA-event times: GPU time when the host keeps up) and synchronized after every call (median
wall time: what a step that waits on its result sees; the gap is host time). SDPA runs on
its cuDNN and flash backends with ``enable_gqa``. From the profiler it takes each kernel's GPU
time and reports effective TFLOP/s over the tiles the kernels visit (4·D flops per element of
a visited tile forward, 10·D backward), next to cuDNN's over the causal triangle; the
``ideal_ms`` column is cuDNN's time times the fraction of tiles the layout must visit.
Writes ``bench_models.json`` under DIR (after every row) and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

import tilesparse as ts
from tilesparse.backends.triton.op import override_config, tile_config
from tilesparse.bench.attention import forward_tiles, tile_area
from tilesparse.bench.grid import PATTERNS as GRID_PATTERNS
from tilesparse.bench.timing import synchronized_ms
from tilesparse.ir import tile_stats

DEV = torch.device("cuda")
# the benchmark's patterns (tilesparse.bench.grid), each compiled with backend "auto" unless
# the command line says otherwise
PATTERNS = {name: p.spec for name, p in GRID_PATTERNS.items() if name not in ("dense-triton", "perhead")}
DEFAULT_SHAPES = "1,32,8,128,8192;1,32,8,128,16384;1,32,8,128,32768;1,32,8,128,65536"
DEFAULT_PATTERNS = "dense,keep0.7,keep0.5,keep0.3,hash8,hash16,hash64,hybrid"


def gpu_ms(fn, calls: int = 10) -> float:
    """Back to back: median CUDA-event time per call, over at least ``calls`` calls.

    ``do_bench`` times as many calls as fit in ``rep`` ms (at least one): with a fixed 60 ms a
    call of 40 ms or more was timed once (the files before run 82), so ``rep`` grows with the
    call's own time, measured first."""
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once_ms = (time.perf_counter() - t) * 1e3
    return triton.testing.do_bench(fn, warmup=5, rep=max(60.0, calls * once_ms), return_mode="median")


def kernel_table(fn, iters: int = 3) -> dict[str, list[float]]:
    """Each kernel's GPU time (ms) and launches per call of ``fn``, by name (cut to 60
    characters), from the profiler."""
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    out: dict[str, list[float]] = {}
    for e in prof.key_averages():
        if e.device_time_total > 0:
            row = out.setdefault(e.key[:60], [0.0, 0.0])
            row[0] += e.device_time_total / 1e3 / iters
            row[1] += e.count / iters
    return out


def kernel_ms(fn, iters: int = 3, every: bool = False) -> dict[str, float]:  # also sweep_kernels.py's
    """GPU time per call by kernel: the forward, the two backward kernels, and the rest (with
    ``every``, each kernel by its name, cut to 60 characters)."""
    out: dict[str, float] = {}
    for key, (ms, _) in kernel_table(fn, iters).items():
        name = key if every else next((k for k in ("_attn_fwd", "_attn_bwd_dq", "_attn_bwd_dkdv") if k in key), "other")
        out[name] = out.get(name, 0.0) + ms
    return out


def probe_args(tag: str, variants: str | dict[str, str], variants_help: str, kernels: tuple[str, ...] = ()) -> argparse.Namespace:
    """The command line of the kernel probes (probe_gluon_fwd.py, probe_gluon_bwd.py); ``kernels``:
    the probe's kernels, the first the default (``--kernel``; ``--variants`` then defaults to
    ``variants[kernel]``)."""
    ap = argparse.ArgumentParser()
    if kernels:
        ap.add_argument("--kernel", choices=kernels, default=kernels[0])
    ap.add_argument("--compile", action="store_true", help="compile for sm_90 only (no GPU): registers, spills, shared")
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="1,32,8,128,16384;1,32,8,128,32768")
    ap.add_argument("--patterns", default="keep0.7,keep0.5")
    ap.add_argument("--variants", default=None if kernels else variants, help=variants_help)
    ap.add_argument("--tag", default=tag)
    args = ap.parse_args()
    if kernels and args.variants is None:
        args.variants = variants[args.kernel]
    return args


def probe_results(args: argparse.Namespace):
    """A kernel probe's results (``run_header`` with no rows yet) and the function that writes
    them to OUT/TAG.json: the probes call it after every row, so that a run cut short keeps what
    it measured."""
    res = run_header(rows=[])

    def write() -> None:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{args.tag}.json").write_text(json.dumps(res, indent=1, default=str))

    return res, write


def probe_group(pattern: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """The kernel probes' inputs: pattern ``pattern``'s first head group on ``q, k, v``, prepared
    for the Triton kernels (decided with a generator seeded 1), and its tile configuration."""
    attn = ts.compile(PATTERNS[pattern], causal=True, backend="triton")
    dec = attn.decide(q, k, generator=torch.Generator(DEV).manual_seed(1))
    return attn.prepare(q, k, v, decisions=dec).groups[0], tile_config(q.shape[-1], q.dtype, DEV)


def run_header(**extra) -> dict:
    """The head of a results file (also sweep_kernels.py's): the GPU, the torch and Triton
    versions and the command line, then ``extra``."""
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "cmd": " ".join(sys.argv), **extra}  # fmt: skip


def bf16_inputs(shape: str) -> tuple[tuple[int, ...], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One ``--shapes`` entry "B,H,Hkv,D,T" (also sweep_kernels.py's): its sizes, and q, k, v
    (requiring grad) and an output gradient drawn in bf16 on the GPU from a generator seeded 0."""
    B, H, Hkv, D, T = map(int, shape.split(","))
    gen = torch.Generator(DEV).manual_seed(0)
    q = torch.randn((B, H, T, D), device=DEV, dtype=torch.bfloat16, generator=gen).requires_grad_()
    k, v = (torch.randn((B, Hkv, T, D), device=DEV, dtype=torch.bfloat16, generator=gen).requires_grad_() for _ in range(2))
    go = torch.randn((B, H, T, D), device=DEV, dtype=torch.bfloat16, generator=gen)
    return (B, H, Hkv, D, T), q, k, v, go


def timed(fn) -> dict[str, float]:
    ms = gpu_ms(fn)
    return {"ms": ms, "sync_ms": synchronized_ms(fn, DEV, ms)}


LABELS = {
    "sdpa-cudnn": "SDPA cuDNN (dense)", "sdpa-flash": "SDPA flash (dense)", "dense": "Dense() (auto: SDPA)",
    "keep0.7": "QKDrop(0.7)", "keep0.5": "QKDrop(0.5)", "keep0.3": "QKDrop(0.3)", "hash8": "Hash(8)",
    "hash16": "Hash(16)", "hash64": "Hash(64)", "hybrid": "Hash(16) + QKDrop(0.7)",
}  # fmt: skip


def table(results: dict) -> str:
    """The README's tables of a results file, per shape (B, H, Hkv, D): forward+backward ms back
    to back / synchronized with the speed-up over cuDNN (back to back), then forward / backward
    TFLOP/s over visited tiles."""
    rows = [r for r in results["rows"] if "error" not in r and r["name"] in LABELS]
    out = []
    for shape in sorted({(r["B"], r["H"], r["Hkv"], r["D"]) for r in rows}):
        mine = [r for r in rows if (r["B"], r["H"], r["Hkv"], r["D"]) == shape]
        seqlens = sorted({r["T"] for r in mine})
        by = {(r["name"], r["T"]): r for r in mine}
        names = [n for n in LABELS if any((n, T) in by for T in seqlens)]
        head = "| " + " | ".join(["B={}, H={}, Hkv={}, D={}".format(*shape), *(f"{T // 1024}k" for T in seqlens)]) + " |"
        sep = "| " + " | ".join(["---"] * (len(seqlens) + 1)) + " |"
        ms, tf = [head, sep], [head, sep]
        for n in names:
            cells, tcells = [], []
            for T in seqlens:
                r = by.get((n, T))
                if r is None:
                    cells.append("-")
                    tcells.append("-")
                    continue
                fb = r["fwd_bwd"]
                x = by[("sdpa-cudnn", T)]["fwd_bwd"]["ms"] / fb["ms"]
                cells.append(f"{fb['ms']:.3g} / {fb['sync_ms']:.3g} ({x:.2f}x)")
                tcells.append(f"{r['fwd_tflops']:.0f} / {r['bwd_tflops']:.0f}" if "fwd_tflops" in r else "-")
            ms.append(f"| {LABELS[n]} | " + " | ".join(cells) + " |")
            if n not in ("dense", "sdpa-flash"):
                tf.append(f"| {LABELS[n]} | " + " | ".join(tcells) + " |")
        out += ["\n".join(ms), "\n".join(tf)]
    return "\n\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", metavar="JSON", nargs="+",
                    help="print the README tables of results files (their rows together: a grid run in parts) and exit")
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="B,H,Hkv,D,T;...")
    ap.add_argument("--patterns", default=DEFAULT_PATTERNS, help=f"from {sorted(PATTERNS)}, each optionally @backend")
    ap.add_argument("--tag", default="models", help="the JSON is bench_TAG.json")
    ap.add_argument("--override", metavar="JSON", help="TileConfig fields for every launch, e.g. '{\"ws_dkdv\": 512}'")
    args = ap.parse_args()
    if args.table:
        print(table({"rows": [r for f in args.table for r in json.loads(Path(f).read_text())["rows"]]}))
        return 0
    if args.override:
        with override_config(**json.loads(args.override)):
            return run(args)
    return run(args)


def run(args) -> int:
    t0 = time.time()
    res = run_header(timing="ms: back to back (do_bench median); sync_ms: synchronized after every call (median wall)",
                     override=json.loads(args.override) if args.override else None, rows=[])  # fmt: skip
    path = Path(args.out) / f"bench_{args.tag}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    for shape in args.shapes.split(";"):
        (B, H, Hkv, D, T), q, k, v, go = bf16_inputs(shape)
        flops_fwd = 4 * D * (T * (T + 1) // 2) * B * H
        base = {"B": B, "H": H, "Hkv": Hkv, "D": D, "T": T}
        cudnn = {}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            row = {**base, "name": f"sdpa-{name}"}
            try:
                with sdpa_kernel(backend):
                    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)  # noqa: E731
                    with torch.no_grad():
                        row["fwd"] = timed(f)
                    row["fwd_bwd"] = timed(lambda: torch.autograd.grad(f(), (q, k, v), go))
                row["fwd_tflops"] = flops_fwd / row["fwd"]["ms"] / 1e9
                row["bwd_tflops"] = 2.5 * flops_fwd / (row["fwd_bwd"]["ms"] - row["fwd"]["ms"]) / 1e9
                if name == "cudnn":
                    cudnn = row
            except Exception as e:  # noqa: BLE001 - a backend that cannot run this shape
                row["error"] = repr(e)[:300]
            res["rows"].append(row)
            print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
        for pname in args.patterns.split(","):
            row = {**base, "name": pname}
            try:
                # "name@backend" forces a backend (e.g. topk8@triton); plain names plan with auto
                spec_name, _, backend = pname.partition("@")
                attn = ts.compile(PATTERNS[spec_name], causal=True, backend=backend or "auto")
                dec = attn.decide(q, k, generator=torch.Generator(DEV).manual_seed(1))
                f = lambda: attn(q, k, v, decisions=dec)  # noqa: E731
                step = lambda: torch.autograd.grad(f(), (q, k, v), go)  # noqa: E731
                with torch.no_grad():
                    row["fwd"] = timed(f)
                row["fwd_bwd"] = timed(step)
                row["plan"] = [f"{a.backend.NAME}" for a in attn.plan(q, k, v, decisions=dec).assignments]
                row["kernels"] = kn = kernel_ms(step)
                cfg = tile_config(D, torch.bfloat16, DEV)
                groups = attn.prepare(q, k, v, decisions=dec).groups
                tiles = forward_tiles(groups, cfg)  # each group in its own forward key tiles
                st_q = [tile_stats(g, block_n=cfg.dq_n, exact=False) for g in groups]
                fwd_el = cfg.block_q * tile_area(tiles, "visited")
                row["visited_fraction"] = vis = tile_area(tiles, "visited") / max(1, tile_area(tiles, "dense_tiles"))
                if "_attn_fwd" in kn:
                    bwd_el = sum(s["visited"] for s in st_q) * cfg.block_q * cfg.dq_n
                    row["fwd_tflops"] = 4 * D * fwd_el / kn["_attn_fwd"] / 1e9
                    bwd = kn.get("_attn_bwd_dq", 0.0) + kn.get("_attn_bwd_dkdv", 0.0)
                    row["bwd_tflops"] = 10 * D * bwd_el / bwd / 1e9
                if cudnn:
                    for mode in ("fwd", "fwd_bwd"):
                        row[f"{mode}_speedup_vs_cudnn"] = cudnn[mode]["ms"] / row[mode]["ms"]
                        row[f"{mode}_ideal_ms"] = cudnn[mode]["ms"] * vis
            except Exception as e:  # noqa: BLE001 - record and go on
                row["error"] = repr(e)[:400]
            res["rows"].append(row)
            print(f"[{time.time() - t0:.0f}s] {json.dumps(row, default=str)}", file=sys.stderr, flush=True)
            path.write_text(json.dumps(res, indent=1, default=str))
            torch.cuda.empty_cache()
        del q, k, v, go
        torch.cuda.empty_cache()
    path.write_text(json.dumps(res, indent=1, default=str))
    print(f"{'shape':>20s} {'name':12s} {'fwd':>8s} {'sync':>8s} {'f+b':>8s} {'sync':>8s} {'x cuDNN':>7s} "
          f"{'vis':>5s} {'TF/s f':>6s} {'TF/s b':>6s}")  # fmt: skip

    def label(r: dict) -> str:
        return f"{r['B']},{r['H']},{r['Hkv']},{r['D']},{r['T']}".rjust(20) + f" {r['name']:12s}"

    def line(r: dict) -> str:
        return (f"{label(r)} {r['fwd']['ms']:8.3f} {r['fwd']['sync_ms']:8.3f} "
                f"{r['fwd_bwd']['ms']:8.3f} {r['fwd_bwd']['sync_ms']:8.3f} {r.get('fwd_bwd_speedup_vs_cudnn', 1):7.2f} "
                f"{r.get('visited_fraction', 1):5.2f} {r.get('fwd_tflops', 0):6.0f} {r.get('bwd_tflops', 0):6.0f}")  # fmt: skip

    return print_rows(res["rows"], label, line, t0)


def print_rows(rows: list[dict], label, line, t0: float) -> int:
    """One line a row (``line(row)``; a failed row as ``label(row)`` and its error), then the
    run's total time (this script's and sweep_kernels.py's summaries)."""
    for r in rows:
        print(f"{label(r)} ERROR {r['error'][:120]}" if "error" in r else line(r))
    print(f"total {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
