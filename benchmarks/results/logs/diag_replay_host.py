"""Where the host time of a replayed call goes (#12): an op compiled with ``cuda_graphs=True``,
decisions given, bf16, causal; host times in microseconds, each the median of runs started on an
idle GPU unless said otherwise. One mode per run (the rows as JSON, a table last):

- ``profile`` (run 73): the whole call (forward+backward, forward with and without grad) and the
  two graphs' ``replay()`` alone, then a torch.profiler table of 20 calls by host time (the CUDA
  API included) and a cProfile of 200 back to back (bound by the GPU: read its order only);
- ``block`` (run 74): each step of a call (copy in, replay, copies out, ...) from an idle GPU and
  right after about 2 ms of GPU work was queued: a step that waits for the GPU takes that long;
- ``backward`` (run 75): the forward (grad mode), then the backward alone
  (``torch.autograd.grad``), the time inside the op's backward function (``graphs._Replay.backward``,
  timed by a wrapper), against the eager op and a trivial autograd function of one kernel;
- ``steps`` (run 76): the call with and without grad, the replay path entered directly
  (``GraphedCalls.run``), the autograd function alone (``graphs._Replay.apply``), the slot's copy
  in / replay / copy out alone (``_Slot.replay_forward``), the argument handling before the replay
  path, and the trivial function's forward.

    python3 benchmarks/results/logs/diag_replay_host.py MODE 1,16,16,64,4096 $OUT/r/out.json [patterns]
"""

import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import torch  # noqa: E402
from bench_models import bf16_inputs, run_header  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse import graphs, library  # noqa: E402
from tilesparse.bench.grid import PATTERNS  # noqa: E402
from tilesparse.ir import check_tensor_args  # noqa: E402
from tilesparse.sdpa_call import PLAIN, parse_sdpa_call  # noqa: E402

_BUSY: list[torch.Tensor] = []


def busy() -> None:
    """Queue about 2 ms of GPU work."""
    if not _BUSY:
        _BUSY.append(torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16))
    for _ in range(2):
        _BUSY[0] @ _BUSY[0]


def host_us(fn, *, n: int = 30, loaded: bool = False, grad: bool | None = None) -> float:
    """Median host time of ``fn`` from an idle GPU (``loaded``: behind :func:`busy`'s work;
    ``grad``: under that grad mode, else the current one)."""
    times = []
    with torch.set_grad_enabled(torch.is_grad_enabled() if grad is None else grad):
        for _ in range(n):
            torch.cuda.synchronize()
            if loaded:
                busy()
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


class Trivial(torch.autograd.Function):
    """One kernel each way: the autograd machinery's own host time."""

    @staticmethod
    def forward(ctx, q, k, v):
        return q * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None, None


INSIDE: list[float] = []  # host time inside graphs._Replay.backward (mode backward)


def _timed_backward(backward):
    def timed(ctx, grad_out):
        t = time.perf_counter()
        out = backward(ctx, grad_out)
        INSIDE.append((time.perf_counter() - t) * 1e6)
        return out

    return staticmethod(timed)


def mode_profile(attn, dec, q, k, v, go, slot) -> dict:
    step = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
    row = {
        "call_fwd_bwd_us": host_us(step),
        "call_fwd_us": host_us(lambda: attn(q, k, v, decisions=dec)),
        "call_fwd_nograd_us": host_us(lambda: attn(q, k, v, decisions=dec), grad=False),
        "fwd_graph_replay_us": host_us(slot.forward),
        "bwd_graph_replay_us": host_us(slot.backward),
    }
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            step()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=50))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(200):
        step()
    torch.cuda.synchronize()
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(25)
    print(buf.getvalue()[:6000])
    return row


def mode_block(attn, dec, q, k, v, go, slot) -> dict:
    x = torch.empty_like(q)
    with torch.no_grad():
        attn(q, k, v, decisions=dec)  # the no-grad call's slot
    steps = {
        "call_fwd_bwd": (lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go), True),
        "call_fwd_nograd": (lambda: attn(q, k, v, decisions=dec), False),
        "copy_in": (lambda: slot.copy_in((q, k, v), dec, PLAIN), False),
        "fwd_replay": (slot.forward, False),
        "out_clone": (lambda: slot.out.clone(), False),
        "empty_like": (lambda: torch.empty_like(q), False),
        "copy_": (lambda: x.copy_(q), False),
        "grad_out_copy": (lambda: slot.grad_out.copy_(go), False),
        "bwd_replay": (slot.backward, False),
        "grad_copies": (lambda: graphs._copies(slot.grads), False),
    }
    return {s: [host_us(fn, grad=g), host_us(fn, grad=g, loaded=True)] for s, (fn, g) in steps.items()}


def measure_fwd_bwd(fwd, q, k, v, go, n: int = 40) -> dict:
    """The forward's host time, then the backward's alone (the GPU idle when each starts)."""
    f_us, b_us = [], []
    INSIDE.clear()
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fwd()
        f_us.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch.autograd.grad(out, (q, k, v), go, allow_unused=True)
        b_us.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    row = {"fwd_us": statistics.median(f_us), "bwd_us": statistics.median(b_us)}
    if INSIDE:
        row["inside_bwd_us"] = statistics.median(INSIDE)
    return row


def mode_steps(attn, dec, q, k, v, go, slot) -> dict:
    run = attn._graphed()
    dev = q.device
    with torch.no_grad():
        attn(q, k, v, decisions=dec)  # the no-grad call's slot

    def before_replay():
        check_tensor_args(q, k, v)
        parse_sdpa_call(q, k, causal=True)
        with library.no_autocast(dev):
            attn._replay_refusal(q, dec, PLAIN, None)
            attn._poll_errors(dev)

    def replay_apply():
        out = graphs._Replay.apply(slot, dec, None, PLAIN, q, k, v)
        slot.holder = None  # free the slot again (no backward follows)
        return out

    steps = {
        "call_nograd": (lambda: attn(q, k, v, decisions=dec), False),
        "call_grad": (lambda: attn(q, k, v, decisions=dec), True),
        "run_nograd": (lambda: run.run(q, k, v, dec, None, PLAIN), False),
        "run_grad": (lambda: run.run(q, k, v, dec, None, PLAIN), True),
        "replay_apply": (replay_apply, True),
        "replay_forward": (lambda: slot.replay_forward((q, k, v), dec, PLAIN, None), False),
        "before_replay": (before_replay, False),
        "trivial_apply": (lambda: Trivial.apply(q, k, v), True),
    }
    return {s: host_us(fn, n=50, grad=g) for s, (fn, g) in steps.items()}


MODES = {"profile": mode_profile, "block": mode_block, "steps": mode_steps}


def main() -> None:
    mode, shape, out = sys.argv[1:4]
    if mode not in (*MODES, "backward"):
        raise SystemExit(f"MODE must be one of {[*MODES, 'backward']}, got {mode!r}")
    names = (sys.argv[4] if len(sys.argv) > 4 else "keep0.7,hash64").split(",")
    _, q, k, v, go = bf16_inputs(shape)
    res = run_header(rows=[])
    if mode == "block":
        busy()
        torch.cuda.synchronize()
        t = time.perf_counter()
        busy()
        torch.cuda.synchronize()
        res["busy_ms"] = (time.perf_counter() - t) * 1e3
    if mode == "backward":
        graphs._Replay.backward = _timed_backward(graphs._Replay.backward)
        res["rows"].append({"name": "trivial", **measure_fwd_bwd(lambda: Trivial.apply(q, k, v), q, k, v, go)})
    for name in names:
        p = PATTERNS[name]
        for graphed in (True, False) if mode == "backward" else (True,):
            attn = ts.compile(p.spec, causal=True, backend=p.backend or "auto", cuda_graphs=graphed)
            dec = attn.decide(q.detach(), k.detach(), generator=torch.Generator(q.device).manual_seed(1))
            for _ in range(3):
                torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)
            if mode == "backward":
                label = name + (" replayed" if graphed else " eager")
                row = {"name": label, **measure_fwd_bwd(lambda: attn(q, k, v, decisions=dec), q, k, v, go)}
            else:
                slot = next(s for slots in attn._graphed().slots.values() for s in slots)  # the grad call's
                row = {"name": name, **MODES[mode](attn, dec, q, k, v, go, slot)}
            res["rows"].append(row)
            print(json.dumps(row), flush=True)
    Path(out).write_text(json.dumps(res, indent=1))
    if mode == "block":
        print(f"busy: {res['busy_ms']:.2f} ms of GPU work queued before each 'loaded' measurement")
    for r in res["rows"]:
        cells = (
            f"{s} {t[0]:.0f}/{t[1]:.0f}" if isinstance(t, list) else f"{s} {t:.0f}" for s, t in r.items() if s != "name"
        )
        print(f"{r['name']:18s} " + " ".join(cells))


if __name__ == "__main__":
    main()
