"""Decoding against a pattern-aware KV cache: step time and bytes read, against dense decoding.

    python3 benchmarks/bench_decode.py --out DIR [--contexts 8192,32768,131072] [--batch 8]
        [--heads 8] [--kv-heads 8] [--head-dim 128] [--device cuda] [--no-prefill]

One decode step = one query token per sequence (B=8, H=8, Hkv=8, D=128 by default: the
Sparse Feature Attention paper's decoding setting), bf16, against a cache of C tokens filled
with the pattern's own decisions (``KVCache.decide``: lsh with the cache's rotations,
bernoulli, topk_abs). Timed: the step's attention (``decode_step`` with the Triton split-K
kernel: index slice, reads, merge), replayed from a CUDA graph, GPU time per step by CUDA
events (median over replays); against

- dense decoding: ``F.scaled_dot_product_attention`` with q of length 1 over the whole cache
  (every SDPA backend that takes it; the best is the baseline), also replayed from a graph;
- FlexAttention decoding (torch.compile'd ``flex_attention``, the pattern as a mask over the
  cache's decisions) where it compiles and runs; the error is recorded where it does not.

Bytes per step: what the kernel reads (index entries, slot entries, K rows or compressed keys,
V rows of the keys in the query's slice), against the ideal (K and V bytes of only the keys the
pattern keeps) and dense decoding's (K and V of every cached token). Memory per token of the
cache against dense bf16 K and V.

Chunked prefill (``--no-prefill`` skips it): a 4,096-token chunk at the end of a 131,072-token
sequence, forward only, through the op with Tq = 4096 < Tk = 131072 (given K/V, the cache's
gather excluded, and through the cache, gather included), per token against the sparse prefill
of the whole sequence per token.

Writes DIR/bench_decode.json and DIR/bench_decode.png (step time against context per pattern).
On the CPU (``--device cpu``, tiny sizes) it runs the same rows eagerly with the torch decode
step: a smoke test of the script, no timing worth reading.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.inference import decode_step, key_slices  # noqa: E402

from benchmarks.shared_options import add_head_options  # noqa: E402

PATTERNS = {
    "hash16": ts.Hash(buckets=16),
    "qkdrop0.5": ts.QKDrop(keep=0.5),
    "topk8": ts.TopKFeatures(k=8),
}
SDPA_BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}


def _ms(fn, device: torch.device, reps: int = 50) -> float:
    """Median milliseconds of ``fn`` (CUDA events on a GPU, wall time on the CPU)."""
    fn()
    if device.type != "cuda":
        t = []
        for _ in range(3):
            a = time.perf_counter()
            fn()
            t.append((time.perf_counter() - a) * 1e3)
        return statistics.median(t)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def _graphed(fn, device: torch.device):
    """``fn`` captured in a CUDA graph (replayed by the returned callable); ``fn`` on the CPU."""
    if device.type != "cuda":
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()  # warm-up: compile kernels, allocate
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def fill_cache(attn, B, H, Hkv, D, C, dtype, device, chunk=8192):
    """A cache of C tokens with the pattern's own decisions, and the next token's q and
    query decisions."""
    g = torch.Generator(device=device).manual_seed(0)
    cache = attn.new_cache(B, C + 1, Hkv, D, dtype=dtype, device=device, heads=H)
    cache.record_reads = False
    for t0 in range(0, C, chunk):
        n = min(chunk, C - t0)
        k = torch.randn((B, Hkv, n, D), generator=g, device=device, dtype=dtype)
        v = torch.randn((B, Hkv, n, D), generator=g, device=device, dtype=dtype)
        dec = cache.decide(torch.randn((B, H, n, D), generator=g, device=device, dtype=dtype), k)
        cache.append(k, v, ts.Decisions(**{n_: t for n_, t in dec.items() if n_.startswith("k_")}))
    q = torch.randn((B, H, 1, D), generator=g, device=device, dtype=dtype)
    kq = torch.randn((B, Hkv, 1, D), generator=g, device=device, dtype=dtype)
    dec = cache.decide(q, kq)
    cache.append(kq, kq, ts.Decisions(**{n_: t for n_, t in dec.items() if n_.startswith("k_")}))
    q_dec = ts.Decisions(**{n_: t for n_, t in dec.items() if n_.startswith("q_")})
    return cache, q, q_dec


def step_bytes(cache, q_dec, H) -> dict:
    """Bytes the kernel reads for this step, the ideal, and dense decoding's."""
    esize = torch.finfo(cache.dtype).bits // 8
    D, L = cache.head_dim, cache.length
    _, count = key_slices(cache, q_dec)
    keys = int(count.sum())
    k_row = D * esize if cache.k_ids is None else cache._topk.k * (2 + esize)
    return {
        "keys_read": keys,
        "keys_cached": cache.batch * H * L,
        "bytes_read": keys * (k_row + D * esize + 4 + 4),  # K or compressed K, V, index, slot
        "bytes_ideal": keys * (k_row + D * esize),
        "bytes_dense": cache.batch * cache.kv_heads * L * 2 * D * esize,
        "cache_bytes_per_token": cache.memory_per_token(),
        "dense_bytes_per_token": cache.dense_bytes_per_token(),
    }


def dense_rows(B, H, Hkv, D, C, dtype, device) -> dict:
    g = torch.Generator(device=device).manual_seed(1)
    q = torch.randn((B, H, 1, D), generator=g, device=device, dtype=dtype)
    k = torch.randn((B, Hkv, C + 1, D), generator=g, device=device, dtype=dtype)
    v = torch.randn((B, Hkv, C + 1, D), generator=g, device=device, dtype=dtype)
    out = {}
    for name, be in SDPA_BACKENDS.items():
        if device.type != "cuda" and name != "math":
            continue
        try:
            def fn(be=be):
                with sdpa_kernel([be]):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=H != Hkv)

            out[name] = _ms(_graphed(fn, device), device)
        except Exception as e:  # noqa: BLE001 - a backend that cannot take the shape is a row note
            out[name] = f"error: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
    del k, v
    return out


def flex_row(attn, cache, q, q_dec, device) -> float | str:
    """FlexAttention decoding with the pattern as a mask over the cache's decisions."""
    if device.type != "cuda":
        return "skipped: CPU"
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        B, H, _, D = q.shape
        L = cache.length
        k = cache.keys() if cache.k is not None else cache.keys_per_query_head()
        v = cache.values()
        if k.shape[1] != v.shape[1]:
            v = v.repeat_interleave(k.shape[1] // v.shape[1], dim=1)
        kd = cache.key_decisions()
        spec = attn.spec
        if isinstance(spec, ts.Hash):
            qb, kb = q_dec.q_bucket[..., 0], kd.k_bucket

            def mask_mod(b, h, q_idx, kv_idx):
                return qb[b, h] == kb[b, h, kv_idx]
        elif isinstance(spec, ts.QKDrop):
            qk, kk = q_dec.q_keep[..., 0], kd.k_keep

            def mask_mod(b, h, q_idx, kv_idx):
                return qk[b, h] & kk[b, h, kv_idx]
        else:  # TopKFeatures: the dense mask over q~ and k~
            def mask_mod(b, h, q_idx, kv_idx):
                return kv_idx >= 0

            q = q * torch.zeros_like(q).scatter_(-1, q_dec.q_support.long(), 1)
        bm = create_block_mask(mask_mod, B, H, 1, L, device=device)
        flex = torch.compile(flex_attention, dynamic=False)
        return _ms(_graphed(lambda: flex(q, k, v, block_mask=bm, enable_gqa=k.shape[1] != H), device), device)
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def decode_rows(args, device, dtype) -> list[dict]:
    rows = []
    B, H, Hkv, D = args.batch, args.heads, args.kv_heads, args.head_dim
    kernel = "triton" if device.type == "cuda" else "torch"
    for C in args.contexts:
        dense = dense_rows(B, H, Hkv, D, C, dtype, device)
        best = min((t for t in dense.values() if isinstance(t, float)), default=None)
        print(f"C={C}: dense sdpa {dense}", flush=True)
        for name, spec in PATTERNS.items():
            row = {"context": C, "pattern": name, "spec": str(spec), "batch": B, "heads": H, "kv_heads": Hkv,
                   "head_dim": D, "dense_sdpa_ms": dense, "dense_best_ms": best}  # fmt: skip
            try:
                attn = ts.compile(spec)
                cache, q, q_dec = fill_cache(attn, B, H, Hkv, D, C, dtype, device)
                row.update(step_bytes(cache, q_dec, H))
                fn = lambda: decode_step(cache, q, q_dec, None, kernel=kernel)  # noqa: B023, E731
                row["step_ms"] = _ms(_graphed(fn, device), device)
                row["speedup_vs_dense"] = None if best is None else best / row["step_ms"]
                row["flex_ms"] = flex_row(attn, cache, q, q_dec, device)
                del cache
            except Exception as e:  # noqa: BLE001 - recorded, the grid goes on
                row["error"] = f"{type(e).__name__}: {e}"
                traceback.print_exc()
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k != "dense_sdpa_ms"}), flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def prefill_rows(args, device, dtype) -> list[dict]:
    """Chunks of ``args.chunk`` at the end of ``args.prefill_context`` tokens, forward only."""
    B, H, Hkv, D, C, n = 1, args.heads, args.kv_heads, args.head_dim, args.prefill_context, args.chunk
    rows = []
    g = torch.Generator(device=device).manual_seed(2)
    for name, spec in PATTERNS.items():
        row = {"pattern": name, "context": C, "chunk": n, "batch": B}
        try:
            attn = ts.compile(spec)
            q = torch.randn((B, H, C, D), generator=g, device=device, dtype=dtype)
            k = torch.randn((B, Hkv, C, D), generator=g, device=device, dtype=dtype)
            v = torch.randn((B, Hkv, C, D), generator=g, device=device, dtype=dtype)
            with torch.no_grad():
                dec = attn.decide(q, k)
                whole = _ms(lambda: attn(q, k, v, decisions=dec), device, reps=5)  # noqa: B023
                q_dec = ts.Decisions(**{f: (t[:, :, C - n :] if f.startswith("q_") else t) for f, t in dec.items()
                                        if t is not None})  # fmt: skip
                qc = q[:, :, C - n :]
                chunk = _ms(lambda: attn(qc, k, v, decisions=q_dec), device, reps=5)  # noqa: B023
            row.update(whole_ms=whole, whole_per_token_us=whole / C * 1e3, chunk_ms=chunk,
                       chunk_per_token_us=chunk / n * 1e3)  # fmt: skip
            # through the cache: the gather of the cached K/V included
            cache = attn.new_cache(B, C, Hkv, D, dtype=dtype, device=device, heads=H)
            kd = ts.Decisions(**{f: t[:, :, : C - n] for f, t in dec.items() if t is not None and f.startswith("k_")})
            cache.append(k[:, :, : C - n], v[:, :, : C - n], kd)
            kn = ts.Decisions(**{f: t[:, :, C - n :] for f, t in dec.items() if t is not None and f.startswith("k_")})
            qn = ts.Decisions(**{f: t[:, :, C - n :] for f, t in dec.items() if t is not None and f.startswith("q_")})
            with torch.no_grad():
                t0 = time.perf_counter()
                attn(qc, k[:, :, C - n :], v[:, :, C - n :], cache=cache, decisions=qn.merge(kn))
                if device.type == "cuda":
                    torch.cuda.synchronize()
            row["cache_chunk_ms"] = (time.perf_counter() - t0) * 1e3
            row["cache_chunk_per_token_us"] = row["cache_chunk_ms"] / n * 1e3
            del cache, q, k, v
        except Exception as e:  # noqa: BLE001
            row["error"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
        rows.append(row)
        print(json.dumps(row), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name in PATTERNS:
        pts = [(r["context"], r["step_ms"]) for r in rows if r["pattern"] == name and "step_ms" in r]
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=name)
    dense = sorted({(r["context"], r["dense_best_ms"]) for r in rows if r.get("dense_best_ms")})
    if dense:
        ax.plot(*zip(*dense, strict=True), marker="s", color="k", label="dense SDPA (best)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel("decode step (ms)")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--contexts", default="8192,32768,131072")
    p.add_argument("--batch", type=int, default=8)
    add_head_options(p, heads=8, kv_heads=8, head_dim=128)
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-prefill", action="store_true")
    p.add_argument("--prefill-context", type=int, default=131072)
    p.add_argument("--chunk", type=int, default=4096)
    args = p.parse_args(argv)
    args.contexts = [int(c) for c in args.contexts.split(",")]
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    args.out.mkdir(parents=True, exist_ok=True)
    results = {
        "meta": {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                 "torch": torch.__version__, "dtype": str(dtype), "args": {k: str(v) for k, v in vars(args).items()}},
        "decode": decode_rows(args, device, dtype),
    }  # fmt: skip
    if not args.no_prefill:
        results["prefill"] = prefill_rows(args, device, dtype)
    (args.out / "bench_decode.json").write_text(json.dumps(results, indent=1))
    plot(results["decode"], args.out / "bench_decode.png")
    print(f"wrote {args.out / 'bench_decode.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
