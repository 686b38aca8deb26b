"""GPU time per kernel of one call with decisions made in it (no gradients) against the same
call with them given, from torch.profiler (CUDA activities), and each call's host time, at the
shapes where #12's decide goal is measured (B=2, H=12, D=64 and 128, T=16,384 and 32,768, bf16,
causal, backend="triton"). Prints per call the kernels' names and microseconds, the sum, and the
span from the first kernel's start to the last one's end; writes the rows as JSON. With
``--times`` (from run 175) also each call's time back to back and synchronized
(``tilesparse.bench.timing``, as call_times.py), and the host time of the criteria's own torch
draws (``torch.randn`` of the lsh rotation, ``torch.rand`` and two comparisons of bernoulli).

    python3 diag_decide_kernels.py OUT.json [--times]
"""
import json, sys
import torch
from torch.profiler import ProfilerActivity, profile
import tilesparse as ts
from tilesparse.bench.grid import PATTERNS
from tilesparse.bench.timing import host_us, synchronized_ms, time_call

TIMES = "--times" in sys.argv
DEV = torch.device("cuda")
if TIMES:  # the criteria's draws alone: host microseconds a call, median of 200
    for label, fn in (("randn (12, 64, 8)", lambda: torch.randn((12, 64, 8), device=DEV, dtype=torch.float32)),
                      ("rand 2x393216 + 2 lt", lambda: [u < 0.7 for u in (torch.rand((786432,), device=DEV),) * 2])):
        print(label, "host us", round(host_us(fn, DEV, 200, stat="median", warmup=0), 1), flush=True)

rows = []
for D in (64, 128):
    for T in (16384, 32768):
        g = torch.Generator("cuda").manual_seed(0)
        q, k, v = (torch.randn((2, 12, T, D), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
        for pat in ("hash16", "hash64", "hybrid"):
            op = ts.compile(PATTERNS[pat].spec, causal=True, backend="triton")
            dec = op.decide(q, k)
            calls = {"decided": lambda: op(q, k, v), "given": lambda: op(q, k, v, decisions=dec)}
            for name, fn in calls.items():
                with torch.no_grad():
                    host = host_us(fn, DEV, 30, stat="median", warmup=5)  # each call from an idle GPU
                    with profile(activities=[ProfilerActivity.CUDA]) as prof:
                        for _ in range(3):
                            fn()
                        torch.cuda.synchronize()
                kern = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
                per = {}
                for e in kern:
                    per.setdefault(e.name[:60], []).append(e.device_time)
                kernels = {n: round(sum(t) / 3, 1) for n, t in per.items()}
                span = (max(e.time_range.end for e in kern) - min(e.time_range.start for e in kern)) / 3 if kern else 0
                row = dict(D=D, T=T, pattern=pat, call=name, host_us=round(host, 1),
                           kernels_us=kernels, kernel_sum_us=round(sum(kernels.values()), 1), span_us=round(span, 1))
                if TIMES:
                    with torch.no_grad():
                        row["b2b_us"] = round(1e3 * time_call(fn, DEV, warmup_ms=25, rep_ms=100, min_reps=20, cpu_reps=0)[0], 1)
                        row["sync_us"] = round(1e3 * synchronized_ms(fn, DEV, calls=30), 1)
                rows.append(row)
                print(D, T, pat, name, "host", row["host_us"], "b2b", row.get("b2b_us"), "sync", row.get("sync_us"),
                      "sum", row["kernel_sum_us"], kernels, flush=True)
            del op
json.dump(rows, open(sys.argv[1], "w"), indent=1)
