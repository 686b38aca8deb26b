"""An eager forward (B=1, H=16, D=64 and B=1, H=32, Hkv=8, D=128, T=4096, bf16, causal), layer by
layer: each layer timed alone with what it needs made beforehand, three ways (us per call):
``host`` the median of 400 calls each from an idle device (the time to enqueue it);
``b2b`` calls back to back (``tilesparse.bench.timing.time_call``: do_bench); ``sync`` a
synchronize after every call (``synchronized_ms``: what a step that waits on its result sees;
its gap to ``b2b`` is host time the GPU did not hide). cuDNN and flash SDPA the same way, in the
same process. (Run 154 ran an earlier version: the host figure alone.) Usage: host_layers.py OUT.json"""
import json, statistics, sys, time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import tilesparse as ts  # noqa: E402
from tilesparse.bench.timing import synchronized_ms, time_call  # noqa: E402
from tilesparse.backends.triton.nonfinite import new_flags  # noqa: E402
from tilesparse.backends.triton.op import _SparseAttention, launch_fwd, tile_config  # noqa: E402
from tilesparse.execute import execute  # noqa: E402
from tilesparse.ir import check_inputs  # noqa: E402

torch.autograd.set_multithreading_enabled(False)
dev = torch.device("cuda")


def med(fn, n=400):
    """Median host us of ``fn``, each call from an idle device."""
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    ts_ = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        fn()
        ts_.append(time.perf_counter_ns() - t)
    torch.cuda.synchronize()
    return statistics.median(ts_) / 1e3


def three(fn) -> dict:
    """host, back to back and synchronized us per call of ``fn``."""
    b2b = 1e3 * time_call(fn, dev, warmup_ms=25, rep_ms=100, min_reps=20, cpu_reps=0)[0]
    return {"host": med(fn), "b2b": b2b, "sync": 1e3 * synchronized_ms(fn, dev, calls=200)}


rows = {}


def report(key: str, r: dict) -> None:
    """Print a row and write the JSON so far (a run cut by its time limit keeps its rows)."""
    rows[key] = r
    print(key, {k_: [round(x, 1) for x in v_.values()] for k_, v_ in r.items()}, flush=True)
    Path(sys.argv[1]).write_text(json.dumps({"meta": {"unit": "us per call: host (median of 400 from an idle device), "
                                                              "b2b (do_bench, back to back), sync (median of 200, a "
                                                              "synchronize after each)", "torch": torch.__version__},
                                              "rows": rows}, indent=1))


for shape in ((1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096)):
    B, H, Hkv, D, T = shape
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True)
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True) for _ in range(2))
    for name, spec in (("dense", ts.Dense()), ("keep0.5", ts.QKDrop(keep=0.5)), ("hash16", ts.Hash(buckets=16))):
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k)  # trusted: no checks
        inputs = check_inputs(q, k, v, scale=attn.scale)
        plan = attn._plan(inputs, decides=False)
        a = plan.assignments[0]
        prepared = a.builder.build(plan.program, a.group, a.heads, dec, inputs)
        cfg = tile_config(D, q.dtype, dev)
        Hg = len(prepared.heads)
        o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=dev)
        lse = torch.empty((B, Hg, T), dtype=torch.float32, device=dev)
        flag = new_flags(dev)[0]
        go = torch.randn_like(q)
        r = {
            "call": three(lambda: attn(q, k, v, decisions=dec)),
            "call fwd+bwd": three(lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)),
            "execute": three(lambda: execute(plan, inputs, attn._decide_step(inputs, dec, None, []))),
            "index build": three(lambda: a.builder.build(plan.program, a.group, a.heads, dec, inputs)),
            "backend.attend": three(lambda: a.backend.attend(prepared, inputs)),
            "_SparseAttention.apply": three(lambda: _SparseAttention.apply(q, k, v, prepared, inputs.scale, cfg)),
            "launch_fwd (pair)": three(lambda: launch_fwd(q, k, v, o, lse, prepared, inputs.scale, cfg, flag)),
            "new_flags": three(lambda: new_flags(dev)),
        }
        report(f"{B}x{H}x{Hkv}x{D}x{T}/{name}", r)
    for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        def sdpa():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=H != Hkv)
        try:
            r = {"call": three(sdpa), "call fwd+bwd": three(lambda: torch.autograd.grad(sdpa(), (q, k, v), go))}
        except RuntimeError as e:  # a backend that refuses the shape: recorded, the rest still runs
            print(f"sdpa-{label}: {e}"[:300], flush=True)
            continue
        report(f"{B}x{H}x{Hkv}x{D}x{T}/sdpa-{label}", r)
