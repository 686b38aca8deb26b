"""Where an eager call's host time goes on the GPU's host (#12): per row and mode, the host time
from an idle GPU (median of --calls), the part of it spent inside the Triton launches
(``LeanKernel.launch`` and ``launch.Site``'s launches timed around each, summed per call,
median), the launches per call, and the host time with every Triton launch stubbed out (torch's ops and this library's
Python alone); a bare lean launch of a trivial kernel for scale; then cProfile of 300 calls of
the rows named by --profile (own time, top 30).

    python3 benchmarks/results/logs/host_split.py OUT.json [--shapes ..] [--patterns ..] [--profile row/mode ..]
"""
import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import call_times  # noqa: E402
from tilesparse.backends.triton import launch as L  # noqa: E402
from tilesparse.bench.timing import host_us  # noqa: E402

DEV = torch.device("cuda")
spent = [0.0, 0]
depth = [0]  # inside a timed launch: a site's general launch or miss (LeanKernel.launch) is counted once
real_launch, real_site = L.LeanKernel.launch, L.Site.__call__


def _timed(real):
    def timed(self, *args, **kwargs):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return real(self, *args, **kwargs)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                spent[0] += time.perf_counter() - t
                spent[1] += 1
    return timed


def stub_launch(self, grid, args, constants, keyed=None):
    spent[1] += 1


def stub_site(self, tensors, rest, scalars, reading=None):
    spent[1] += 1


@contextlib.contextmanager
def patched(launch, site):
    """Every Triton launch (LeanKernel.launch, and launch.Site's, which launch on a hit without
    it) replaced by ``launch`` and ``site`` inside the block."""
    L.LeanKernel.launch, L.Site.__call__ = launch, site
    try:
        yield
    finally:
        L.LeanKernel.launch, L.Site.__call__ = real_launch, real_site


def launch_share(fn, calls):
    """(median us inside launches per call, launches per call)"""
    with patched(_timed(real_launch), _timed(real_site)):
        per, n = [], 0
        for _ in range(calls):
            torch.cuda.synchronize()
            spent[0], spent[1] = 0.0, 0
            fn()
            per.append(spent[0])
            n = spent[1]
        return round(1e6 * statistics.median(per), 1), n


@triton.jit
def _trivial(a, b, c, d, n0, n1, n2, n3, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid < 0:
        tl.store(a + pid, tl.load(b + pid))


def bare_launch_us(calls=300):
    t = torch.empty(64, device=DEV)
    k = L.LeanKernel(_trivial)
    f = lambda: k[(1,)](t, t, t, t, 4096, 64, 16, 3, BLOCK=16)  # noqa: E731
    return round(host_us(f, DEV, calls, stat="median", warmup=5), 1), round(
        host_us(lambda: [f() for _ in range(10)], DEV, calls // 10, stat="median", warmup=2) / 10, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", default="1x16x16x64x4096,1x32x8x128x4096")
    ap.add_argument("--patterns", default="dense-triton,keep0.5,hash16,perhead,topk8")
    ap.add_argument("--modes", default="fwd,fwd_bwd")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--profile", nargs="*", default=[])
    ap.add_argument("--explain", action="store_true", help="print each pattern's explain() first")
    a = ap.parse_args()
    torch.autograd.set_multithreading_enabled(False)
    call_times.WANT.update(a.modes.split(","))
    out = {"meta": {"argv": sys.argv[1:], "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                    "triton": triton.__version__, "unit": "us"}, "rows": {}}
    out["bare_lean_launch_us"] = bare_launch_us()
    print("bare lean launch (from idle, back to back):", out["bare_lean_launch_us"], flush=True)
    for shape in a.shapes.split(","):
        rows = call_times.calls_of(shape, a.patterns.split(","))
        if a.explain:
            B, H, Hkv, D, T = (int(x) for x in shape.split("x"))
            q = torch.randn(B, H, T, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            k = torch.randn(B, Hkv, T, D, device=DEV, dtype=torch.bfloat16, requires_grad=True)
            for name in a.patterns.split(","):
                attn = call_times.ts.compile(call_times.PATTERNS[name].spec, causal=True, backend="triton")
                print(attn.explain(q, k, k), flush=True)
        for key, fns in rows.items():
            for mode, fn in fns.items():
                for _ in range(5):
                    fn()
                r = {"host": round(host_us(fn, DEV, a.calls, stat="median", warmup=3), 1)}
                r["in_launches"], r["launches"] = launch_share(fn, a.calls)
                with patched(stub_launch, stub_site):
                    r["stubbed"] = round(host_us(fn, DEV, a.calls, stat="median", warmup=3), 1)
                out["rows"][f"{key}/{mode}"] = r
                print(f"{key}/{mode}", r, flush=True)
                if f"{key}/{mode}" in a.profile or f"{key.split('/')[-1]}/{mode}" in a.profile:
                    pr = cProfile.Profile()
                    for _ in range(300):
                        torch.cuda.synchronize()
                        pr.enable()
                        fn()
                        pr.disable()
                    s = io.StringIO()
                    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
                    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(45)
                    out.setdefault("profiles", {})[f"{key}/{mode}"] = s.getvalue()
                    print(s.getvalue()[:14000], flush=True)
    a.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
