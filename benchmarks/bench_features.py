"""TopKFeatures on the H200: path 1 (dense tiles over q~, k~: the Triton backend) against path 2
(the FlashSFA-style feature-intersection kernel: the CuPy backend) against SDPA flash on the
dense q, k; the fused CuPy index build against the torch and Triton paths; compressed-key bytes.

    python3 benchmarks/bench_features.py --out DIR [--budget-s 200] [--quick]

Rows: k in (4, 8, 16) x D in (64, 128, 256) x T in (4k, 16k, 64k), B=1, H=4, bf16, causal,
fwd and fwd+bwd, decisions given (decide excluded, prepare included, the same for both paths).
A measurement is the median of CUDA-event timings after one warm-up call (compilation
excluded), as many calls as fit in ~0.3 s (at least one). Rows run cheapest first; a row is
skipped, with the reason in the JSON, when the budget is spent or its time predicted from the
previous T (x (T'/T)^2) is over a per-measurement cap. Index build: Hash(buckets=16) (and
with QKDrop) at T = 4k, 16k and 64k, B=1, H=8, D=128, each build as a whole call (host time
included): LSH as torch ops + torch prepare or + Triton's build; the ``lsh`` criterion alone
(one kernel on CUDA); the Triton, CuPy and torch builds with the buckets given; and the CuPy
build hashing in its first launch (two launches in all); and the Triton build after its own
hashing launch. ``--index-only`` runs only these.

Writes DIR/bench_features.json and DIR/bench_features.png; prints a compact table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse import ir  # noqa: E402
from tilesparse.backends.cupy import CupyBackend  # noqa: E402
from tilesparse.backends.cupy.layout import compressed_key_bytes  # noqa: E402
from tilesparse.patterns.criteria import lsh_draw, lsh_matmul  # noqa: E402

DEV = torch.device("cuda")
B, H = 1, 4
KS, DS = (4, 8, 16), (64, 128, 256)
TS = (4096, 16384, 65536)
CAP_S = 12.0  # skip a measurement predicted to take longer than this (warm-up + timed calls)


def timed(fn, min_total=0.3, max_reps=50) -> float:
    """Median milliseconds of ``fn`` after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    times = []
    t_end = time.perf_counter() + min_total
    while len(times) < max_reps and (not times or time.perf_counter() < t_end):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def attention_rows(budget_end: float, quick: bool) -> list[dict]:
    rows = []
    last: dict[tuple, tuple[int, float]] = {}
    ts_ = TS[:2] if quick else TS
    for T in ts_:
        for D in DS:
            for k in KS:
                q, kk, v = (torch.randn((B, H, T, D), device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
                go = torch.randn_like(q)
                spec = ts.TopKFeatures(k=k)
                dec = ts.compile(spec).decide(q, kk)
                ops = {
                    "path1_triton": lambda: ts.compile(spec, causal=True, backend="triton"),
                    "path2_cupy": lambda: ts.compile(spec, causal=True, backend="cupy"),
                }
                for mode in ("fwd", "fwd_bwd"):
                    row = {"k": k, "D": D, "T": T, "mode": mode, "B": B, "H": H, "dtype": "bf16"}
                    for name, make in ops.items():
                        key = (name, k, D, mode)
                        if time.perf_counter() > budget_end:
                            row[name] = {"skipped": "budget spent"}
                            continue
                        if key in last:
                            t0, ms0 = last[key]
                            predicted = ms0 * (T / t0) ** 2 / 1e3
                            if 2 * predicted > CAP_S:
                                row[name] = {"skipped": f"predicted {predicted:.1f} s a call > cap {CAP_S / 2:.0f} s"}
                                continue
                        try:
                            attn = make()
                            f = _fn(lambda attn=attn: attn(q, kk, v, decisions=dec), q, kk, v, go, mode)
                            ms = timed(f)
                            row[name] = {"ms": ms}
                            last[key] = (T, ms)
                        except Exception as e:  # noqa: BLE001 - record and go on
                            row[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
                            traceback.print_exc()
                    try:
                        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                            f = _fn(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True), q, kk, v, go, mode)
                            row["sdpa_flash_dense"] = {"ms": timed(f)}
                    except Exception as e:  # noqa: BLE001
                        row["sdpa_flash_dense"] = {"error": f"{type(e).__name__}: {e}"[:400]}
                    est = CupyBackend.estimate_seconds(k, D, B * H * T * T / 2, backward=mode == "fwd_bwd")
                    row["cost_model_pick"] = min(est, key=est.get).replace("path1_dense_tiles", "path1_triton")
                    rows.append(row)
                    print(_line(row), flush=True)
                del q, kk, v, go
                torch.cuda.empty_cache()
    return rows


def _fn(call, q, k, v, go, mode):
    if mode == "fwd":
        return call

    def run():
        out = call()
        torch.autograd.grad(out, (q, k, v), go)

    return run


def index_rows(budget_end: float, quick: bool) -> list[dict]:
    from tilesparse.backends.cupy import index as cindex
    from tilesparse.backends.triton.hashing import hash_into
    from tilesparse.backends.triton.index import build_group as triton_build

    rows = []
    Hi, D, buckets = 8, 128, 16
    for T in (16384,) if quick else (4096, 16384, 65536):
        for spec in (ts.Hash(buckets=buckets), ts.Hybrid(parts=[ts.Hash(buckets=buckets), ts.QKDrop(keep=0.7)])):
            if time.perf_counter() > budget_end:
                rows.append({"T": T, "spec": str(spec), "skipped": "budget spent"})
                continue
            q, k = (torch.randn((B, Hi, T, D), device=DEV, dtype=torch.bfloat16) for _ in range(2))
            program = ir.lower(spec, causal=True, block_q=64, block_k=64)
            group = program.groups[0]
            heads = tuple(range(Hi))
            kw = dict(batch=B, seqlen=T, device=DEV)
            inputs = ir.check_inputs(q, k, k)  # the builders' sizes and device
            dec0 = ts.compile(spec).decide(q, k, generator=torch.Generator(DEV).manual_seed(0))
            keep = {"q_keep": dec0.q_keep, "k_keep": dec0.k_keep} if dec0.q_keep is not None else {}

            rot = lsh_draw(Hi, D, buckets, DEV, generator=torch.Generator(DEV).manual_seed(0))

            def torch_lsh():  # the criterion's torch ops (a batched matmul, argmaxes)
                qb, kb = lsh_matmul(q, k, rot.to(q.dtype), buckets)
                return ts.Decisions(q_bucket=qb, k_bucket=kb, **keep)

            def triton_lsh():  # the Triton builder's hashing launch (what its fused build runs first)
                qb, kb = (torch.empty((B, Hi, T), dtype=torch.int32, device=DEV) for _ in range(2))
                hash_into(q, k, rot, buckets, qb, kb)
                return ts.Decisions(q_bucket=qb, k_bucket=kb, **keep)

            # the op's lsh decisions (the criterion's draw; on CUDA the Triton builder's hashing
            # launch, lsh_hasher): the cost model's "lsh" line
            lsh = ts.compile(ts.Hash(buckets=buckets)).decide
            paths = {
                "torch_lsh+prepare": lambda: ir.prepare_group(program, group, heads, torch_lsh(), heads=Hi, **kw),
                "torch_lsh+triton_build": lambda: triton_build(program, group, heads, torch_lsh(), inputs),
                "lsh_criterion": lambda: lsh(q, k, generator=torch.Generator(DEV).manual_seed(0)),
                "triton_build(buckets given)": lambda: triton_build(program, group, heads, dec0, inputs),
                "cupy_build(buckets given)": lambda: cindex.build_group(program, group, heads, dec0, inputs),
                "cupy_lsh+build": lambda: cindex.build_group(program, group, heads, ts.Decisions(**keep), inputs,
                                                             rotations=rot),  # fmt: skip
                "triton_lsh+build": lambda: triton_build(program, group, heads, triton_lsh(), inputs),
                "torch_prepare(buckets given)": lambda: ir.prepare_group(program, group, heads, dec0, heads=Hi, **kw),
            }
            row = {"T": T, "spec": str(spec), "B": B, "H": Hi, "D": D}
            for name, f in paths.items():
                try:
                    row[name] = {"ms": timed(f)}
                except Exception as e:  # noqa: BLE001
                    row[name] = {"error": f"{type(e).__name__}: {e}"[:400]}
                    traceback.print_exc()
            rows.append(row)
            print("index", json.dumps(row), flush=True)
    return rows


def memory_rows() -> list[dict]:
    return [
        {"k": k, "D": D, "dtype": "bf16", **compressed_key_bytes(k, D, torch.bfloat16)}
        for k in KS
        for D in DS
    ]


def _ms(cell) -> str:
    if not isinstance(cell, dict):
        return "-"
    if "ms" in cell:
        return f"{cell['ms']:.3f}"
    return "skip" if "skipped" in cell else "ERR"


def _faster(row) -> str | None:
    p1, p2 = row.get("path1_triton", {}), row.get("path2_cupy", {})
    if "ms" in p1 and "ms" in p2:
        return "path2_cupy" if p2["ms"] < p1["ms"] else "path1_triton"
    return "path1_triton" if "ms" in p1 else None


def _line(row) -> str:
    faster = _faster(row)
    pick = row["cost_model_pick"]
    ok = "-" if faster is None else ("ok" if _pick_ok(row) else "WRONG")
    return (f"k={row['k']:>2} D={row['D']:>3} T={row['T']:>6} {row['mode']:<7} path1 {_ms(row.get('path1_triton')):>9} "
            f"path2 {_ms(row.get('path2_cupy')):>9} sdpa {_ms(row.get('sdpa_flash_dense')):>8} "
            f"faster {faster or '-':<12} pick {pick:<12} {ok}")  # fmt: skip


def _pick_ok(row) -> bool:
    """The cost model's pick is the faster path, or within 10% of it."""
    times = {n: row[n]["ms"] for n in ("path1_triton", "path2_cupy") if "ms" in row.get(n, {})}
    if row["cost_model_pick"] not in times:
        return row["cost_model_pick"] == "path1_triton" or not times
    return times[row["cost_model_pick"]] <= 1.1 * min(times.values())


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DS), figsize=(5 * len(DS), 4), squeeze=False)
    styles = {4: ":", 8: "--", 16: "-"}
    colors = {"path1_triton": "C0", "path2_cupy": "C3", "sdpa_flash_dense": "C2"}
    for ax, D in zip(axes[0], DS, strict=True):
        for k in KS:
            for name, color in colors.items():
                pts = [(r["T"], r[name]["ms"]) for r in rows
                       if r["D"] == D and r["k"] == k and r["mode"] == "fwd_bwd" and "ms" in r.get(name, {})]  # fmt: skip
                if pts and not (name == "sdpa_flash_dense" and k != KS[0]):
                    xs, ys = zip(*sorted(pts), strict=True)
                    label = name if name == "sdpa_flash_dense" else f"{name} k={k}"
                    ax.plot(xs, ys, styles[k] if name != "sdpa_flash_dense" else "-", color=color, marker="o", label=label)
        ax.set(xscale="log", yscale="log", xlabel="T", ylabel="fwd+bwd ms", title=f"TopKFeatures, D={D}, bf16, causal")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="directory for bench_features.json/.png")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop starting measurements after this many seconds")
    ap.add_argument("--quick", action="store_true", help="T up to 16k only")
    ap.add_argument("--index-only", action="store_true", help="only the index-build rows")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    # the attention rows get 80% of the budget, the index rows the rest
    rows = [] if args.index_only else attention_rows(start + 0.8 * args.budget_s, args.quick)
    index = index_rows(start + args.budget_s, args.quick)
    memory = memory_rows()
    crossover = [f"k={r['k']} D={r['D']} T={r['T']} {r['mode']}" for r in rows if _faster(r) == "path2_cupy"]
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "attention": rows,
        "index_build": index,
        "compressed_key_bytes": memory,
        "path2_faster_rows": crossover,
        "cost_model_pick_ok": sum(_pick_ok(r) for r in rows),
        "rows": len(rows),
        "wall_s": time.perf_counter() - start,
    }
    (args.out / "bench_features.json").write_text(json.dumps(result, indent=1))
    try:
        plot(rows, args.out / "bench_features.png")
    except Exception:  # noqa: BLE001 - the JSON is what matters
        traceback.print_exc()
    print("\n== TopKFeatures: path 1 (triton dense tiles on q~, k~) vs path 2 (cupy feature intersection), ms ==")
    for r in rows:
        print(_line(r))
    print("\n== index build, ms ==")
    for r in index:
        cells = "  ".join(f"{n} {_ms(c)}" for n, c in r.items() if isinstance(c, dict))
        print(f"T={r['T']:>6} {r['spec']}: {cells}")
    print("\n== compressed keys, bytes per token (bf16) ==")
    for m in memory:
        print(f"k={m['k']:>2} D={m['D']:>3}: dense {m['dense']:.0f}  compressed {m['compressed']:.2f}  ({m['ratio']:.1f}x)")
    where = "; ".join(crossover) if crossover else "never on this chip (no row where path 2 beats path 1)"
    print(f"\npath 2 faster: {where}")
    print(f"cost-model pick within 10% of the faster path: {result['cost_model_pick_ok']} of {len(rows)} rows")
    print(f"wall {result['wall_s']:.0f} s; JSON {args.out / 'bench_features.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
