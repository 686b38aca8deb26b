"""Where the time of a call that makes its own decisions goes (#12: "decisions made in the call
add at most 10%"). Per shape and pattern (bf16, causal): the forward and forward+backward with
decisions given and made, and ``attn.decide`` alone, each timed back to back
(``bench_models.gpu_ms``: do_bench's median) and as host time from an idle GPU
(``probe_host.host_us``, median); one JSON line per row into --out. ``--tables`` adds profiler
tables (CPU ops by self time, kernels by GPU time) of the made-decisions forward, ``--cprofile``
a cProfile of 300 ``attn.decide`` calls (own and cumulative time: cProfile inflates small
Python functions, read the order). Run from the repository root."""
import argparse, cProfile, io, json, pstats, sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, "benchmarks")
import probe_host  # noqa: E402
from bench_models import bf16_inputs, gpu_ms  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.bench.grid import PATTERNS  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--shapes", default="2,12,12,64,16384;2,12,12,128,16384", help="B,H,Hkv,D,T;...")
ap.add_argument("--patterns", default="hash16,hash64,keep0.7,hybrid")
ap.add_argument("--tag", default="", help="a label for each row (an A/B's tree)")
ap.add_argument("--tables", default="", help="patterns whose made-decisions forward is profiled")
ap.add_argument("--cprofile", default="", help="patterns whose attn.decide is profiled with cProfile")
ap.add_argument("--out", required=True, help="JSON lines, appended")
args = ap.parse_args()
probe_host.STAT[0] = "median"
dev = torch.device("cuda")


def cprofile_decide(decide) -> dict:
    """cProfile's tables (own, cumulative time) of 300 calls, a synchronize every 10."""
    with cProfile.Profile() as pr:
        for i in range(300):
            decide()
            if i % 10 == 9:
                torch.cuda.synchronize()
    tables = {}
    for key in ("tottime", "cumtime"):
        pstats.Stats(pr, stream=(text := io.StringIO())).sort_stats(key).print_stats(28)
        tables[key] = text.getvalue()
    return tables


for shape in args.shapes.split(";"):
    _, q, k, v, go = bf16_inputs(shape)
    for name in args.patterns.split(","):
        attn = ts.compile(PATTERNS[name].spec, causal=True)
        dec = attn.decide(q.detach(), k.detach())
        calls = {
            "fwd_given": lambda: attn(q.detach(), k.detach(), v.detach(), decisions=dec),
            "fwd_made": lambda: attn(q.detach(), k.detach(), v.detach()),
            "fb_given": lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go),
            "fb_made": lambda: torch.autograd.grad(attn(q, k, v), (q, k, v), go),
            "decide": lambda: attn.decide(q.detach(), k.detach()),
        }
        row = dict(tag=args.tag, shape=shape, pattern=name)
        for label, fn in calls.items():
            row[label + "_ms"] = gpu_ms(fn)
            row[label + "_host_us"] = probe_host.host_us(fn, 20, dev)
        if name in args.tables.split(","):
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    calls["fwd_made"]()
                torch.cuda.synchronize()
            ka = prof.key_averages()
            row["cpu_table"] = ka.table(sort_by="self_cpu_time_total", row_limit=30)
            row["cuda_table"] = ka.table(sort_by="self_cuda_time_total", row_limit=20)
        if name in args.cprofile.split(","):
            row["cprofile_decide"] = cprofile_decide(calls["decide"])
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(args.tag, shape, name, " ".join(f"{k_}={v_:.3f}" for k_, v_ in row.items() if k_.endswith("_ms")),
              " host us:", " ".join(f"{k_[:-8]}={v_:.0f}" for k_, v_ in row.items() if k_.endswith("_host_us")),
              flush=True)
