"""Where an eager call's backward host time goes (#12), and what autograd's worker thread costs.

Per shape, for ``torch.autograd.set_multithreading_enabled`` on (torch's default: a CUDA
backward runs on the device's worker thread, the calling thread waits) and off (the calling
thread runs it): the forward's host time, then the backward's alone (``torch.autograd.grad``, the
GPU idle when each starts, medians of 40, µs) of

- a trivial autograd function of one kernel each way (autograd's own share);
- cuDNN SDPA;
- the eager op (Hash(16), QKDrop(0.7); decisions given), with the time inside its autograd
  function's backward and in its parts there (the launch pairs, the GQA sums into the kv heads,
  the flag's zeros, the first-order guard), each timed by a wrapper;
- the op compiled with ``cuda_graphs=True`` (replayed), with the time inside its backward.

    python3 benchmarks/results/logs/diag_eager_bwd.py 1,32,8,128,4096 $OUT/r/out.json
"""

import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/results/logs/

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_models import bf16_inputs, run_header  # noqa: E402
from diag_replay_host import Trivial, measure_fwd_bwd  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse import graphs  # noqa: E402
from tilesparse.backends.triton import op  # noqa: E402
from tilesparse.bench.grid import PATTERNS  # noqa: E402

PARTS: dict[str, list[float]] = collections.defaultdict(list)  # label -> µs per call


def timed(label: str, fn):
    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        out = fn(*args, **kwargs)
        PARTS[label].append((time.perf_counter() - t) * 1e6)
        return out

    return wrapper


def instrument() -> None:
    op._SparseAttention.backward = staticmethod(timed("inside_bwd", op._SparseAttention.backward))
    graphs._Replay.backward = staticmethod(timed("inside_bwd", graphs._Replay.backward))
    for name in ("launch_pair", "_sum_into_heads", "sum_into_kv_heads", "new_flag", "first_order_only"):
        if hasattr(op, name):  # the GQA sum: torch ops (_sum_into_heads) or one launch (sum_into_kv_heads)
            setattr(op, name, timed(name, getattr(op, name)))


def measure(fwd, q, k, v, go, n: int = 40) -> dict:
    """:func:`diag_replay_host.measure_fwd_bwd`, and the wrapped parts' time per call (a part
    may run more than once a call)."""
    PARTS.clear()
    row = measure_fwd_bwd(fwd, q, k, v, go, n)
    return row | {label + "_us": sum(xs) / n for label, xs in PARTS.items()}


def main() -> None:
    shape, out = sys.argv[1:3]
    _, q, k, v, go = bf16_inputs(shape)
    instrument()
    res = run_header(rows=[])
    ops = {}
    for name in ("hash16", "keep0.7"):
        for graphed in (False, True):
            attn = ts.compile(PATTERNS[name].spec, causal=True, backend="triton", cuda_graphs=graphed)
            dec = attn.decide(q.detach(), k.detach(), generator=torch.Generator(q.device).manual_seed(1))
            ops[name + (" replayed" if graphed else " eager")] = (attn, dec)
    for threads in (True, False):
        with torch.autograd.set_multithreading_enabled(threads):
            calls = {"trivial": lambda: Trivial.apply(q, k, v)}

            def sdpa():
                with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

            calls["sdpa cudnn"] = sdpa
            for label, (attn, dec) in ops.items():
                calls[label] = lambda attn=attn, dec=dec: attn(q, k, v, decisions=dec)
            for label, fn in calls.items():
                for _ in range(3):
                    torch.autograd.grad(fn(), (q, k, v), go, allow_unused=True)
                row = {"name": label, "threads": threads, **measure(fn, q, k, v, go)}
                res["rows"].append(row)
                print(json.dumps(row), flush=True)
    Path(out).write_text(json.dumps(res, indent=1))
    for r in res["rows"]:
        cells = " ".join(f"{s[:-3]} {t:.0f}" for s, t in r.items() if s.endswith("_us"))
        print(f"{r['name']:18s} threads={r['threads']!s:5s} {cells}")


if __name__ == "__main__":
    main()
