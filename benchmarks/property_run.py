"""The long property run: hypothesis examples over specs x decisions x shapes x dtypes, both
passes (output and the gradients of q, k, v) against the float64 reference, on the GPU.

One invocation is one shard: it draws examples (seeds of its own) until ``--max-examples`` or
the ``--budget-s`` time budget (default 420 s: with the last batch and the start-up, a shard
fits a 10-minute device call), records every mismatch instead of stopping at the first, and
writes a JSON with the example count (a draw equal to one the shard already checked is skipped
and counted as a repeat). Shards add up: run them until their counts sum to the
target (10,000), then ``--sum`` totals the JSON files.

    TRITON_INTERPRET=0 python benchmarks/property_run.py --shard 0 --out benchmarks/results/property/shard0.json
    python benchmarks/property_run.py --sum benchmarks/results/property/shard*.json

What varies: every spec kind (PerHead and Hybrid included) with edge-case decisions
(``tilesparse.testing.decisions``: empty rows, dropped heads, disjoint buckets, ...), causal or
not, T up to 16,384 (mostly short: a float64 T x T reference per head is the cost), grouped-query
heads, D 64/128/256, fp16/bf16/fp32, the planner's choice (``auto``) or Triton forced.
``--device cpu --max-t 64`` is a smoke run (reference and executor backends, interpreter).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import signal
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.testing import assert_equivalent, decisions, specs  # noqa: E402

# max error relative to the reference's largest magnitude, per input dtype (tests/gpu's)
# examples per hypothesis run; the budget is checked between runs. Hypothesis begins every run
# from its simplest draws (T=1 or a band's end, every other field at its first value): those
# repeat across runs and are checked once (``_fingerprint``); at 10 a run, they were a fifth
BATCH = 25
# bucket counts and top-k sizes drawn from a few values: each value is a kernel specialization
# (segment and category counts are compile-time constants), and a run that drew every value
# would spend its time compiling; the CPU suite covers the whole ranges under the interpreter
BUCKETS = (1, 2, 5, 16, 64)
TOP_K = (1, 7, 32)  # those <= D
TOL = {torch.float32: 2e-3, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _lengths(max_t: int) -> st.SearchStrategy[int]:
    """Mostly short sequences, some long ones up to ``max_t``: seven in ten up to 2,048, two up
    to 8,192, one up to ``max_t`` (bands drawn by index: ``st.one_of`` would merge repeated
    strategies and weigh the bands equally)."""
    bands = [(1, min(max_t, 2048))] * 7
    if max_t > 2048:
        bands += [(2048, min(max_t, 8192))] * 2 + [(min(max_t, 8192), max_t)]
    return st.sampled_from(bands).flatmap(lambda band: st.integers(*band))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shard", type=int, default=0, help="this shard's number (its hypothesis seed)")
    p.add_argument("--max-examples", type=int, default=5000)
    p.add_argument("--budget-s", type=float, default=420.0, help="stop drawing examples after this many seconds")
    p.add_argument("--max-t", type=int, default=16384)
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", help="JSON path of this shard's result")
    p.add_argument("--sum", nargs="+", metavar="JSON", help="total the given shard results and exit")
    args = p.parse_args(argv)
    if args.sum:
        return _sum(args.sum)
    if not args.out:
        p.error("--out is required for a run")
    device = torch.device(args.device)
    if device.type == "cuda" and os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("set TRITON_INTERPRET=0: on the GPU the kernels must run compiled")
    backends = ["auto", "triton"] if device.type == "cuda" else ["reference", "executor"]
    dtypes = [torch.float16, torch.bfloat16, torch.float32] if device.type == "cuda" else [torch.float32]
    dims = [64, 128, 256] if device.type == "cuda" else [16, 32]

    result: dict = {"shard": args.shard, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                    "command": " ".join(["python", *sys.argv]), "examples": 0, "mismatches": [], "errors": [],
                    "by_dtype": {}, "by_backend": {}, "max_t": 0,
                    "repeats": 0, "seconds": []}  # fmt: skip
    seen: set[tuple] = set()
    t0 = time.perf_counter()

    @settings(max_examples=BATCH, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(data=st.data())
    def run(data):
        T = data.draw(_lengths(args.max_t), label="T")
        H, Hkv = data.draw(st.sampled_from([(2, 2), (4, 2), (4, 1)] if T > 8192 else [(2, 2), (4, 4), (4, 2), (8, 2), (3, 1)]), label="heads")
        D = data.draw(st.sampled_from(dims), label="D")
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        backend = data.draw(st.sampled_from(backends), label="backend")
        causal = data.draw(st.booleans(), label="causal")
        spec = data.draw(specs(heads=H, buckets=st.sampled_from(BUCKETS), k=st.sampled_from([k for k in TOP_K if k <= D])), label="spec")
        dec = data.draw(decisions(spec, (1, H, T, D), device=device), label="decisions")
        s = data.draw(st.integers(0, 2**31 - 1), label="seed")
        case = dict(spec=str(spec), causal=causal, T=T, H=H, Hkv=Hkv, D=D, dtype=str(dtype), backend=backend, seed=s)
        key = _fingerprint(case, dec)
        if key in seen:  # the same spec, shape, dtype, backend, inputs' seed and decisions
            result["repeats"] += 1
            return
        seen.add(key)
        start = time.perf_counter()
        try:  # the inputs too: out of memory (shards share a GPU) is an error recorded, not a crash
            g = torch.Generator(device).manual_seed(s)
            q, k, v = (torch.randn((1, h, T, D), generator=g, device=device).to(dtype) for h in (H, Hkv, Hkv))
            attn = ts.compile(spec, causal=causal, backend=backend)
            assert_equivalent(attn, q, k, v, decisions=dec, atol=TOL[dtype])
        except AssertionError as e:
            result["mismatches"].append({**case, "error": str(e)[-2000:]})
        except Exception as e:  # noqa: BLE001 - a refused combination is recorded, not a mismatch
            result["errors"].append({**case, "error": f"{type(e).__name__}: {e}"[-2000:],
                                     "traceback": traceback.format_exc()[-2000:]})  # fmt: skip
            return
        result["examples"] += 1
        result["by_dtype"][str(dtype)] = result["by_dtype"].get(str(dtype), 0) + 1
        result["by_backend"][backend] = result["by_backend"].get(backend, 0) + 1
        result["max_t"] = max(result["max_t"], T)
        # where a shard's time goes (first compiles against long sequences), per example
        result["seconds"].append([T, D, str(dtype), backend, type(spec).__name__, causal, round(time.perf_counter() - start, 3)])
        if device.type == "cuda":
            torch.cuda.empty_cache()

    def stop(signum, frame):  # a time limit's SIGTERM still writes the examples counted so far
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    try:
        # batches of BATCH examples, each with its own seed, until the count or the budget is
        # reached (a time check inside one hypothesis run would make its replay inconsistent)
        batch = 0
        while result["examples"] < args.max_examples and time.perf_counter() - t0 < args.budget_s:
            seed(args.shard * 1_000_000 + batch)(run)()
            batch += 1
    except KeyboardInterrupt as e:
        result["interrupted"] = str(e)
    finally:
        result["elapsed_s"] = round(time.perf_counter() - t0, 1)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"shard {args.shard}: {result['examples']} examples ({result['repeats']} repeated draws skipped), "
          f"{len(result['mismatches'])} mismatches, "
          f"{len(result['errors'])} errors in {result['elapsed_s']} s -> {args.out}")  # fmt: skip
    return 1 if result["mismatches"] else 0


def _fingerprint(case: dict, dec) -> tuple:
    """An example's identity: its case and the bytes of its decisions (a repeated draw has both
    equal, and then the same q, k, v from the same seed)."""
    digest = hashlib.blake2b(digest_size=16)
    for name, t in dec.items() if dec is not None else ():
        digest.update(name.encode())
        if t is not None:
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.detach().contiguous().view(-1).view(torch.uint8).cpu().numpy().tobytes())
    return (*sorted(case.items()), digest.hexdigest())


def _sum(paths: list[str]) -> int:
    files = sorted({f for p in paths for f in glob.glob(p)})
    rows = [json.loads(Path(f).read_text()) for f in files]
    total = sum(r["examples"] for r in rows)
    bad = sum(len(r["mismatches"]) for r in rows)
    repeats = sum(r.get("repeats", 0) for r in rows)  # shards before 59 did not skip them
    errors = Counter(e["error"].split(":", 1)[0] for r in rows for e in r["errors"])
    kinds = f" ({', '.join(f'{n} {kind}' for kind, n in errors.most_common())})" if errors else ""
    print(f"{len(rows)} shards (seeds {sorted(r['shard'] for r in rows)}): {total} examples "
          f"({repeats} repeated draws skipped), {bad} mismatches, "
          f"{errors.total()} errors{kinds}, T up to {max((r['max_t'] for r in rows), default=0)}")  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
