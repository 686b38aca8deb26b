"""A lean launch against Triton's own, on a no-op kernel, with the lean path's parts timed
alone: us per call, 2000 calls back to back (five interleaved rounds), and with a synchronize
after each call (``tilesparse.bench.timing.synchronized_ms``, 200 calls: the wait a caller of
one launch sees). (Run 153 ran an earlier version: back to back alone.) Usage: launch_micro.py OUT.json"""
import json, statistics, sys, time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tilesparse.backends.triton import launch as L  # noqa: E402
from tilesparse.backends.triton.launch import lean, prepared  # noqa: E402
from tilesparse.bench.timing import synchronized_ms  # noqa: E402


@triton.jit
def _noop(x_ptr, n, BLOCK: tl.constexpr):
    pass


@triton.jit
def _store(x_ptr, n, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), tl.arange(0, BLOCK).to(tl.float32))


dev = torch.device("cuda")
x = torch.empty(1024, device=dev)
lk = lean(_noop)
ls = lean(_store)


def per_call(fn, n=2000):
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


args = (x, 1024)
key = lk.keyed(args)
cases = {
    "lean noop": lambda: lk[(1,)](x, 1024, BLOCK=16),
    "lean noop launch() direct": lambda: lk.launch((1,), args, {"BLOCK": 16}),
    "lean noop launch() keyed": lambda: lk.launch((1,), args, {"BLOCK": 16}, key),
    "normal noop": lambda: _noop[(1,)](x, 1024, BLOCK=16),
    "normal noop +fp_fusion": lambda: _noop[(1,)](x, 1024, BLOCK=16, enable_fp_fusion=True),
    "lean store": lambda: ls[(1,)](x, 1024, BLOCK=16),
    "normal store": lambda: _store[(1,)](x, 1024, BLOCK=16, enable_fp_fusion=True),
    "prepared(args)": lambda: prepared(args),
    "torch.cuda.current_device": torch.cuda.current_device,
    "raw stream": lambda: L._raw_stream()(0),
    "knobs.runtime hooks": lambda: (L._listening(triton.knobs.runtime.launch_enter_hook), L._listening(triton.knobs.runtime.launch_exit_hook)),
}
for fn in cases.values():
    for _ in range(100):
        fn()
torch.cuda.synchronize()
res = {k: [] for k in cases}
for _ in range(5):
    for k, fn in cases.items():
        res[k].append(per_call(fn))
out = {k: {"median_us": statistics.median(v), "rounds": v,
           "synchronized_us": 1e3 * synchronized_ms(cases[k], dev, calls=200)} for k, v in res.items()}
out["lean hits/misses"] = [lk.hits, lk.misses, ls.hits, ls.misses]
out["lean enabled"] = [lk.enabled, ls.enabled]
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
for k, v in out.items():
    print(f"{k:32s} {v['median_us']:.2f} {v['synchronized_us']:.2f}" if isinstance(v, dict) else f"{k:32s} {v}")
