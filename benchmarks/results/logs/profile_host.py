"""Where an eager call's host time goes on the GPU machine: cProfile of N calls per pattern
(each from an idle device: a synchronize before it, outside the profile window is not possible
with cProfile, so the synchronize is in it and listed), and the costs of torch's building blocks
on this host (an empty CUDA tensor, a view, an autograd.Function, a lean launch of a no-op
kernel) for scale. Usage: profile_host.py OUT_DIR [N] [PATTERNS] [SHAPES] (comma-separated; SHAPES as
BxHxHkvxDxT)"""
import cProfile, io, json, pstats, sys, time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import tilesparse as ts  # noqa: E402
import probe_host as ph  # noqa: E402
from tilesparse.backends.triton.launch import lean  # noqa: E402

out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
NAMES = sys.argv[3].split(",") if len(sys.argv) > 3 else ("dense-triton", "keep0.5", "hash16", "topk8", "perhead", "hybrid")
SHAPES = ([tuple(int(x) for x in s.split("x")) for s in sys.argv[4].split(",")] if len(sys.argv) > 4
          else ((1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096)))
torch.autograd.set_multithreading_enabled(False)
dev = torch.device("cuda")


def per_call(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return dt


@triton.jit
def _noop(x_ptr, n, BLOCK: tl.constexpr):
    pass


x = torch.empty(1024, device=dev)
blocks = {}
blocks["torch.empty(1024) cuda"] = per_call(lambda: torch.empty(1024, device=dev))
blocks["torch.zeros(1024) cuda"] = per_call(lambda: torch.zeros(1024, device=dev))
blocks["x.as_strided"] = per_call(lambda: x.as_strided((4, 256), (256, 1), 0))
blocks["x[:, idx] select (index tensor)"] = per_call(lambda: x.view(4, 256)[1:3])
blocks["lean noop launch"] = per_call(lambda: lean(_noop)[(1,)](x, 1024, BLOCK=16))
blocks["triton noop kernel[grid]"] = per_call(lambda: _noop[(1,)](x, 1024, BLOCK=16))


class Id(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a.view_as(a)

    @staticmethod
    def backward(ctx, g):
        return g


y = torch.empty(1024, device=dev, requires_grad=True)
blocks["autograd.Function.apply"] = per_call(lambda: Id.apply(y))
blocks["python function call (us)"] = per_call(lambda: None, 100000)
print(json.dumps(blocks, indent=1))

B, H, Hkv, D, T = 1, 16, 16, 64, 4096
report = {"blocks": blocks, "profiles": {}}
for shape in SHAPES:
    B, H, Hkv, D, T = shape
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True)
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True) for _ in range(2))
    go = torch.randn_like(q)
    for name in NAMES:
        attn = ts.compile(ph.PATTERNS[name], causal=True, backend="triton")
        dec = attn.decide(q, k)
        given = ts.Decisions(**{n: None if t is None else t.clone() for n, t in dec.items()})
        for mode, fn in (("fwd", lambda: attn(q, k, v, decisions=given)),
                         ("fwd_bwd", lambda: torch.autograd.grad(attn(q, k, v, decisions=given), (q, k, v), go)),
                         ("fwd_decide", lambda: attn(q, k, v))):
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(N):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
            times.sort()
            pr = cProfile.Profile()
            for _ in range(N):
                torch.cuda.synchronize()
                pr.enable()
                fn()
                pr.disable()
            torch.cuda.synchronize()
            s = io.StringIO()
            st = pstats.Stats(pr, stream=s)
            st.sort_stats("tottime").print_stats(40)
            st.sort_stats("cumulative").print_stats(60)
            key = f"{'x'.join(map(str, shape))}/{name}/{mode}"
            report["profiles"][key] = {"median_us": 1e6 * times[len(times) // 2]}
            (out / (key.replace('/', '_') + ".txt")).write_text(s.getvalue())
            print(key, round(1e6 * times[len(times) // 2], 1), flush=True)
(out / "profile_host.json").write_text(json.dumps(report, indent=1))
