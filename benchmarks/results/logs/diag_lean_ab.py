"""The lean launch path as committed before run 101 (OLD: one Python loop builds the key, tensors
handed to Triton's launcher as tensors, the constants' tail built per launch) against the current
one (launch.prepared: C-level loops, scalar keys remembered, CUDA tensors handed over as their
addresses; the tail cached with the compiled kernel), A/B in one process.

1. A kernel that does nothing, with 16 pointer and 8 int arguments: microseconds a launch through
   LeanKernel.launch each way, and through ``kernel[grid]``; medians of 9 rounds of 2,000
   launches (a synchronize every 100).
2. The op, decisions given (copies, so checked), bf16, causal, backend="triton": per round and
   way the mean host time of 30 forward calls (no grad) and of 30 forward+backward calls, each
   started on an idle GPU (probe_host's method); 8 rounds, the two ways interleaved.

    python3 benchmarks/results/logs/diag_lean_ab.py OUT.json
"""
import json, statistics, sys, time
import torch
import triton
import triton.language as tl

import tilesparse as ts
from tilesparse.backends.triton import launch as L
from tilesparse.bench.grid import PATTERNS


def old_arg_key(args):
    out = []
    for a in args:
        kind = type(a)
        if kind is int:
            out.append(L._int_key(a))
        elif isinstance(a, torch.Tensor):
            out.append(a.dtype)
            out.append(a.data_ptr() % 16 == 0)
        elif kind is float:
            out.append(float)
        else:
            out.append((a,))
    return tuple(out)


def old_keyed(self, args):
    return old_arg_key(args) if self.enabled and not L._NORMAL[0] else None


def old_launch(self, grid, args, constants, args_key=None):
    if not self.enabled or L._NORMAL[0]:
        self._normal(grid, args, constants)
        return
    runtime = triton.knobs.runtime
    if L._listening(runtime.launch_enter_hook) or L._listening(runtime.launch_exit_hook):
        self._normal(grid, args, constants)
        return
    device = self._device()
    key = (device, tuple(constants.items()), old_arg_key(args) if args_key is None else args_key)
    cache = self.__dict__.setdefault("old_cache", {})
    compiled = cache.get(key)
    if compiled is None:
        compiled = self._normal(grid, args, constants)
        if hasattr(compiled, "result"):
            compiled = compiled.result()
        cache[key] = compiled
        return
    if len(args) != self.n_runtime:
        raise TypeError("arity")
    tail = tuple(constants[n] if n in constants else self.defaults[n] for n in self.const_names)
    g0 = grid[0]
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    stream = self._stream(device)
    compiled.run(g0, g1, g2, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *tail)


NEW = {"keyed": L.LeanKernel.keyed, "launch": L.LeanKernel.launch}
OLD = {"keyed": old_keyed, "launch": old_launch}


def use(way):
    for name, fn in way.items():
        setattr(L.LeanKernel, name, fn)


@triton.jit
def _nop(P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15,
         n0, n1, n2, n3, n4, n5, n6, n7, BLOCK: tl.constexpr):
    if n0 < 0:
        tl.store(P0 + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


def per_launch_us(fn, n=2000):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i in range(n):
        fn()
        if i % 100 == 99:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return 1e6 * (time.perf_counter() - t0) / n


result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
args = (*[torch.zeros(1024, device="cuda") for _ in range(16)], 4096, 128, 1, 7, 64, 3, 2**20, 5)
k = L.lean(_nop)
micro = {"old": [], "new": []}
for way, fns in (("old", OLD), ("new", NEW)):
    use(fns)
    for _ in range(3):
        k.launch((1,), args, {"BLOCK": 128})
for _ in range(9):
    for way, fns in (("old", OLD), ("new", NEW)):
        use(fns)
        micro[way].append(per_launch_us(lambda: k.launch((1,), args, {"BLOCK": 128})))
use(NEW)
micro = {f"lean_{w}": statistics.median(v) for w, v in micro.items()}
micro["triton_kernel_grid"] = statistics.median(per_launch_us(lambda: _nop[(1,)](*args, BLOCK=128), n=500)
                                                for _ in range(5))
result["micro_us"] = micro
print(json.dumps(micro), flush=True)


def host_us(fn, n=30):
    ts_ = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts_.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.fmean(ts_)


rows = []
for shape in ("1x16x16x64x4096", "1x32x8x128x4096"):
    B, H, Hkv, D, T = map(int, shape.split("x"))
    g = torch.Generator("cuda").manual_seed(0)
    q = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    kk, vv = (torch.randn((B, Hkv, T, D), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
              for _ in range(2))
    go = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g)
    for pat in ("hash16", "keep0.7", "hybrid"):
        op = ts.compile(PATTERNS[pat].spec, causal=True, backend="triton")
        dec = op.decide(q, kk)
        given = ts.Decisions(**{n: None if t is None else t.clone() for n, t in dec.items()})

        def fwd():
            with torch.no_grad():
                op(q, kk, vv, decisions=given)

        def fwd_bwd():
            op(q, kk, vv, decisions=given).backward(go)
            q.grad = kk.grad = vv.grad = None

        for fns in (OLD, NEW):
            use(fns)
            for _ in range(3):
                fwd_bwd()
        for r in range(8):
            for way, fns in (("old", OLD), ("new", NEW)):
                use(fns)
                rows.append({"shape": shape, "pattern": pat, "round": r, "way": way,
                             "fwd_host_us": host_us(fwd), "fwd_bwd_host_us": host_us(fwd_bwd)})
        use(NEW)
        for way in ("old", "new"):
            sel = [x for x in rows if x["shape"] == shape and x["pattern"] == pat and x["way"] == way]
            f = statistics.median(x["fwd_host_us"] for x in sel)
            fb = statistics.median(x["fwd_bwd_host_us"] for x in sel)
            print(f"{shape} {pat:8s} {way} fwd {f:6.0f} us  fwd+bwd {fb:6.0f} us (medians of 8 rounds)", flush=True)
result["rows"] = rows
with open(sys.argv[1], "w") as fh:
    json.dump(result, fh, indent=1)
