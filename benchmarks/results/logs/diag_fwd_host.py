"""Why a QKDrop forward takes more host time than a Hash(16) one at B=1, H=16, D=64, T=4,096
(run 196: 182-226 µs against 114, the same three launches). Per pattern, a forward with
gradients on and decisions given (call_times.py's ``fwd``), bf16, causal, backend="triton":
the host time of one call from an idle GPU (median of 200), the lean launch path's misses per
call (a miss takes Triton's own launch: every LeanKernel of launch._LEAN and of the Gluon
modules), and cProfile's top functions by own time over 300 calls, each synchronized.

    python3 benchmarks/results/logs/diag_fwd_host.py [PATTERN,...]
"""
import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

import tilesparse as ts
from tilesparse.backends.triton import launch as L
from tilesparse.bench.grid import PATTERNS


def misses() -> int:
    return sum(k.misses for k in L._LEAN.values())


def main(names: list[str]) -> None:
    torch.autograd.set_multithreading_enabled(False)
    B, H, D, T = 1, 16, 64, 4096
    g = torch.Generator("cuda").manual_seed(0)
    q, k, v = (torch.randn((B, H, T, D), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))  # fmt: skip
    for name in names:
        attn = ts.compile(PATTERNS[name].spec, causal=True, backend="triton")
        dec = attn.decide(q, k)

        def fn():
            return attn(q, k, v, decisions=dec)

        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        m0 = misses()
        times = []
        for _ in range(200):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            times.append(1e6 * (time.perf_counter() - t0))
        torch.cuda.synchronize()
        per_call = (misses() - m0) / 200
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(300):
            fn()
            torch.cuda.synchronize()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        body = [line for line in s.getvalue().splitlines() if line.strip()][-14:]
        print(f"== {name}: host {statistics.median(times):.0f} us a forward (median of 200), "
              f"lean-path misses {per_call:.2f} a call", flush=True)
        print("\n".join(body), flush=True)


if __name__ == "__main__":
    main(sys.argv[1].split(",") if len(sys.argv) > 1 else ["hash16", "keep0.5", "keep0.7", "dense-triton"])
