"""Host time of the lean launch path with tensors handed to Triton's launcher as addresses (the
launcher skips its per-tensor data_ptr() call and cuPointerGetAttribute query) against as tensors
(the path before), in one process.

1. A kernel that does nothing, with 16 pointer and 8 int arguments: microseconds a launch, median
   of 9 rounds of 2,000 launches (a synchronize every 100), through the compiled kernel's ``run``
   with tensors and with addresses, through ``LeanKernel.launch`` each way, and through
   ``kernel[grid]``; then the lean hit path's parts (current device, raw stream, key, prepared()).
2. The op, decisions given (copies, so checked), bf16, causal, backend="triton": per round and
   way, the mean host time of 30 forward calls and of 30 forward+backward calls, each started
   on an idle GPU (probe_host's method); 8 rounds, the two ways interleaved.

    python3 benchmarks/results/logs/diag_launch_addresses.py OUT.json
"""
import json, statistics, sys, time
import torch
import triton
import triton.language as tl

import tilesparse as ts
from tilesparse.backends.triton import launch as L
from tilesparse.bench.grid import PATTERNS

NEW = L.prepared


def as_tensors(args):
    """The path before: the key as now, the tensors themselves to the launcher."""
    return NEW(args)[0], tuple(args)


@triton.jit
def _nop(P0, P1, P2, P3, P4, P5, P6, P7, P8, P9, P10, P11, P12, P13, P14, P15,
         n0, n1, n2, n3, n4, n5, n6, n7, BLOCK: tl.constexpr):
    if n0 < 0:
        tl.store(P0 + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32))


def per_launch_us(fn, n=2000, rounds=9):
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(n):
            fn()
            if i % 100 == 99:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        out.append(1e6 * (time.perf_counter() - t0) / n)
    return statistics.median(out)


result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
bufs = [torch.zeros(1024, device="cuda") for _ in range(16)]
ints = [4096, 128, 1, 7, 64, 3, 2**20, 5]
args = (*bufs, *ints)
k = L.lean(_nop)
k[(1,)](*args, BLOCK=128)  # compile (a miss)
k[(1,)](*args, BLOCK=128)
compiled = next(iter(k.cache.values()))
stream = torch.cuda.current_stream().cuda_stream
addr = NEW(args)[1]


def run_with(a):
    return lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                                *a, 128)


micro = {
    "run_tensors": per_launch_us(run_with(args)),
    "run_addresses": per_launch_us(run_with(addr)),
    "lean_addresses": per_launch_us(lambda: k.launch((1,), args, {"BLOCK": 128})),
}
L.prepared = as_tensors
micro["lean_tensors"] = per_launch_us(lambda: k.launch((1,), args, {"BLOCK": 128}))
L.prepared = NEW
micro["triton_kernel_grid"] = per_launch_us(lambda: _nop[(1,)](*args, BLOCK=128), n=500, rounds=5)
consts = {"HEAD_DIM": 64, "BLOCK_D": 64, "BLOCK_M": 128, "BLOCK_N": 64, "MAX_SEG": 1, "CAUSAL": True, "STRICT": False,
          "SAME_BUCKET": True, "NOT_SELF": False, "PRECISION": "tf32", "SINGLE_LOOP": True, "num_warps": 4,
          "num_stages": 3}
attn_args = (*bufs[:15], *([4096] * 24))
for name, fn in {
    "current_device": torch.cuda.current_device,
    "raw_stream": lambda: L._raw_stream()(0),
    "constants_key": lambda: hash((0, tuple(consts.items()))),
    "prepared_39_args": lambda: NEW(attn_args),
}.items():
    t0 = time.perf_counter()
    for _ in range(20000):
        fn()
    micro[f"part_{name}"] = 1e6 * (time.perf_counter() - t0) / 20000
result["micro_us"] = micro
print(json.dumps(micro, indent=1), flush=True)


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

        for _ in range(5):
            fwd_bwd()
        ways = {"addresses": NEW, "tensors": as_tensors}
        for r in range(8):
            for way, prep in ways.items():
                L.prepared = prep
                rows.append({"shape": shape, "pattern": pat, "round": r, "way": way,
                             "fwd_host_us": host_us(fwd), "fwd_bwd_host_us": host_us(fwd_bwd)})
        L.prepared = NEW
        for way in ways:
            sel = [x for x in rows if x["shape"] == shape and x["pattern"] == pat and x["way"] == way]
            f = statistics.median(x["fwd_host_us"] for x in sel)
            fb = statistics.median(x["fwd_bwd_host_us"] for x in sel)
            print(f"{shape} {pat:8s} {way:9s} fwd {f:6.0f} us  fwd+bwd {fb:6.0f} us (medians of 8 rounds)", flush=True)
result["rows"] = rows
with open(sys.argv[1], "w") as fh:
    json.dump(result, fh, indent=1)
