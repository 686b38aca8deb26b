"""Host time per call, by stage: where the CPU spends a call of every built-in pattern.

Each figure is the mean host time of ``--calls`` runs of one stage (time.perf_counter), each
started on an idle device (a synchronize before it, not timed: a loop of calls without one
would time the GPU once the launch queue fills), after warm-up (compilation excluded), in
microseconds. Stages, in the order a call runs them:

- ``checks``: the argument checks (tensor arguments, SDPA keywords, inputs, spec fits);
- ``plan``: the plan lookup;
- ``decision_checks`` / ``decision_checks_novalidate``: checking given decisions (validate=True /
  False);
- ``decide``: making the decisions;
- ``index``: every group's index build (launches only, on the GPU), bound to the call's
  signature as a call runs it (``IndexBuilder.bind``);
- ``attend_fwd``: the attention forward through the autograd function (inputs need grad), bound
  likewise (``Backend.bind``);
- ``attend_fwd_bwd``: that and its backward; ``backward`` is the difference;
- the whole call: ``call_fwd`` and ``call_fwd_bwd`` with decisions given, ``call_fwd_decide``
  with decisions made, each host-only (``*_host``: no synchronize inside the loop) and
  synchronized (``*_sync``: a synchronize after every call); ``call_*_normal_host``: the same
  with every kernel through Triton's ``kernel[grid]`` (the lean launch path switched off);
- ``launches_fwd`` / ``launches_fwd_bwd``: Triton kernel launches per call (decisions given);
- ``graphed_fwd_*`` / ``graphed_fwd_bwd_*`` (GPU, ``--graphed``): the call replayed from CUDA
  graphs made by ``torch.cuda.make_graphed_callables`` (forward and backward captured once,
  decisions given; a call copies new q, k, v in and replays), and ``graphed_max_err``, its
  difference from the eager call;
- ``replay_fwd_*`` / ``replay_fwd_bwd_*`` / ``replay_fwd_decide_*`` (GPU, ``--replay``): the same
  calls on an op compiled with ``cuda_graphs=True`` (``tilesparse.graphs``: the op captures
  each call signature once and replays it), and ``replay_max_err``, its difference from the
  eager call (decisions given).

The op is compiled with ``backend="triton"`` (Triton's own index builder); ``--backend auto``
lets the planner pick each group's index builder (CuPy's where its line prices lower), and every
row names its plan's ``backends`` and ``index_builders``.

Backward passes run on autograd's device thread, torch's default for CUDA tensors (the calling
thread hands each backward over and waits); ``--no-autograd-threads`` runs them on the calling
thread (``torch.autograd.set_multithreading_enabled(False)``), SDPA's included.

SDPA's forward and forward+backward are measured for scale (eager and graphed). Shapes: B=1, H=16, D=64, T=4096
and B=1, H=32, Hkv=8, D=128, T=4096 (bf16, causal); ``--shapes`` takes others as BxHxHkvxDxT.

On the GPU (what the figures are for):

    TRITON_INTERPRET=0 python3 benchmarks/probe_host.py --out DIR

On the CPU (Python-side overhead only): ``TRITON_INTERPRET=1 ... --device cpu`` replaces every
Triton launch by a counting no-op (``--stub-kernels``, on by default there: the interpreter
would run the kernels for minutes), so the figures are this library's Python and torch calls
and the launch counts, without Triton's own launch cost or any kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import tilesparse as ts  # noqa: E402
from tilesparse.execute import with_dense_heads  # noqa: E402
from tilesparse.ir import check_inputs, check_tensor_args  # noqa: E402
from tilesparse.sdpa_call import parse_sdpa_call  # noqa: E402
from tilesparse.bench import timing  # noqa: E402
from tilesparse.bench.grid import PATTERNS as GRID_PATTERNS  # noqa: E402

PATTERNS = {name: p.spec for name, p in GRID_PATTERNS.items() if name != "dense"}  # Dense on Triton
SHAPES = ("1x16x16x64x4096", "1x32x8x128x4096")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


STAT = ["mean"]  # --stat


def host_us(fn, calls: int, device: torch.device, *, sync_each: bool = False, warmup: int = 3) -> float:
    """:func:`tilesparse.bench.timing.host_us` with ``--stat``'s statistic."""
    return timing.host_us(fn, device, calls, stat=STAT[0], sync_each=sync_each, warmup=warmup)


class LaunchCounter:
    """Counts Triton kernel launches; with ``stub`` (interpreter only) launches nothing."""

    def __init__(self, stub: bool):
        self.stub = stub
        self.count = 0

    @contextlib.contextmanager
    def installed(self):
        from tilesparse.backends.triton.op import interpreting

        counter = self
        if interpreting():
            from triton.runtime.interpreter import InterpretedFunction

            cls, name = InterpretedFunction, "run"
        else:
            if self.stub:
                raise SystemExit("--stub-kernels needs TRITON_INTERPRET=1 (it replaces the interpreter's launches)")
            try:
                from tilesparse.backends.triton.launch import LeanKernel

                cls, name = LeanKernel, "launch"
            except ImportError:
                from triton.runtime.jit import JITFunction

                cls, name = JITFunction, "run"
        original = getattr(cls, name)

        def counted(self_, *args, **kwargs):
            counter.count += 1
            if counter.stub:
                return None
            return original(self_, *args, **kwargs)

        setattr(cls, name, counted)
        try:
            yield self
        finally:
            setattr(cls, name, original)

    def per_call(self, fn, device: torch.device, calls: int = 5) -> float:
        fn()
        _sync(device)
        before = self.count
        for _ in range(calls):
            fn()
        _sync(device)
        return (self.count - before) / calls


def _normal_launches():
    try:
        from tilesparse.backends.triton.launch import normal_launches
    except ImportError:
        return None
    return normal_launches


def probe_pattern(name, spec, shape, args, device, counter) -> dict:
    B, H, Hkv, D, T = shape
    dtype = torch.bfloat16
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn((B, H, T, D), device=device, dtype=dtype, generator=gen).requires_grad_(True)
    k, v = (torch.randn((B, Hkv, T, D), device=device, dtype=dtype, generator=gen).requires_grad_(True) for _ in range(2))
    go = torch.randn_like(q)
    attn = ts.compile(spec, causal=True, backend=args.backend)
    attn_nv = ts.compile(spec, causal=True, backend=args.backend, validate=False)
    dec = attn.decide(q, k)
    # a copy: decisions this op did not make, so a call checks them (what a caller's given ones cost)
    given = ts.Decisions(**{n: None if t is None else t.clone() for n, t in dec.items()})
    calls = args.calls
    rows: dict[str, float] = {}
    t = lambda fn, **kw: host_us(fn, calls, device, **kw)  # noqa: E731

    def checks():
        check_tensor_args(q, k, v)
        parse_sdpa_call(q, k, causal=True)
        inputs = check_inputs(q, k, v, scale=attn.scale)
        attn._check_spec_fits(inputs)

    inputs = check_inputs(q, k, v, scale=attn.scale)
    rows["checks"] = t(checks)
    rows["plan"] = t(lambda: attn._plan(inputs, decides=False))
    if spec.decision_fields:
        rows["decision_checks"] = t(lambda: attn._decisions(inputs, given, None))
        rows["decision_checks_novalidate"] = t(lambda: attn_nv._decisions(inputs, given, None))
        rows["decide"] = t(lambda: attn._decide(inputs, None))
    plan = attn._plan(inputs, decides=False)
    rows["backends"] = [a.backend.NAME for a in plan.assignments]
    rows["index_builders"] = [a.builder.NAME if a.builder else None for a in plan.assignments]

    indexed = sorted({s.group for s in plan.steps if s.kind == "index"})
    # each step as a call runs it: bound once to the call's signature (tilesparse.execute)
    builds = {i: plan.assignments[i].builder.bind(plan.program, plan.assignments[i].group, plan.assignments[i].heads, inputs)
              for i in indexed}  # fmt: skip

    def index():
        out = []
        for i in indexed:
            a = plan.assignments[i]
            out.append((a, builds[i](with_dense_heads(dec, a.dense_heads), inputs)))
        return out

    prepared = index()
    rows["index"] = t(index)
    rows["launches_index"] = counter.per_call(index, device)

    attends = [a.backend.bind(a.group, a.heads, inputs) for a, _ in prepared]

    def attend():
        return [bound(g, inputs) for bound, (a, g) in zip(attends, prepared, strict=True)]

    def attend_fb():
        outs = attend()
        torch.autograd.grad(outs, (q, k, v), [go[:, list(a.heads)] for a, _ in prepared])

    rows["attend_fwd"] = t(attend)
    rows["attend_fwd_bwd"] = t(attend_fb)
    rows["backward"] = rows["attend_fwd_bwd"] - rows["attend_fwd"]

    fwd = lambda: attn(q, k, v, decisions=dec)  # noqa: E731
    fwd_bwd = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
    fwd_decide = lambda: attn(q, k, v)  # noqa: E731
    for label, fn in (("call_fwd", fwd), ("call_fwd_bwd", fwd_bwd), ("call_fwd_decide", fwd_decide)):
        rows.update(host_and_sync(label, fn, calls, device))
    normal = _normal_launches()
    if normal is not None and not counter.stub:
        with normal():
            rows["call_fwd_normal_host"] = t(fwd)
            rows["call_fwd_bwd_normal_host"] = t(fwd_bwd)
    rows["launches_fwd"] = counter.per_call(fwd, device)
    rows["launches_fwd_bwd"] = counter.per_call(fwd_bwd, device)
    if args.graphed and device.type == "cuda":
        try:
            rows.update(probe_graphed(lambda q_, k_, v_: attn(q_, k_, v_, decisions=given), q, k, v, go, device, calls))
        except Exception as e:  # noqa: BLE001 - recorded in the JSON, the other rows still count
            rows["graphed_error"] = f"{type(e).__name__}: {e}"[:500]
    if args.replay and device.type == "cuda":
        try:
            rows.update(probe_replay(spec, q, k, v, go, dec, fwd, device, calls))
        except Exception as e:  # noqa: BLE001 - recorded in the JSON, the other rows still count
            rows["replay_error"] = f"{type(e).__name__}: {e}"[:500]
    return rows


def max_err(got, want) -> float:
    """The largest difference between two sequences of tensors, pairwise (0.0: equal)."""
    return max((a.float() - b.float()).abs().max().item() for a, b in zip(got, want, strict=True))


def with_grads(out, inputs, go) -> tuple:
    """A call's output ``out`` and the gradients of its ``inputs`` under ``go`` (one call)."""
    return (out.detach(), *torch.autograd.grad(out, inputs, go))


def probe_replay(spec, q, k, v, go, dec, eager_fwd, device, calls) -> dict:
    """The calls of :func:`probe_pattern` on an op compiled with ``cuda_graphs=True``."""
    op = ts.compile(spec, causal=True, backend="triton", cuda_graphs=True)
    fwd = lambda: op(q, k, v, decisions=dec)  # noqa: E731
    fwd_bwd = lambda: torch.autograd.grad(op(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
    fwd_decide = lambda: op(q, k, v)  # noqa: E731
    want = with_grads(eager_fwd(), (q, k, v), go)
    got = (fwd().detach(), *fwd_bwd())
    rows = {"replay_max_err": max_err(got, want)}
    for label, fn in (("replay_fwd", fwd), ("replay_fwd_bwd", fwd_bwd), ("replay_fwd_decide", fwd_decide)):
        rows.update(host_and_sync(label, fn, calls, device))
    stats = op.graph_stats
    rows["replay_captures"], rows["replay_eager_calls"] = stats.captures, sum(stats.eager.values())
    return rows


def host_and_sync(label: str, fn, calls: int, device: torch.device) -> dict:
    """``{label}_host`` and ``{label}_sync``: :func:`host_us` of ``fn`` without and with a
    synchronize after every call."""
    return {f"{label}_host": host_us(fn, calls, device), f"{label}_sync": host_us(fn, calls, device, sync_each=True)}


def probe_graphed(call, q, k, v, go, device, calls) -> dict:
    """``call(q, k, v)`` replayed from CUDA graphs: ``torch.cuda.make_graphed_callables``
    captures its forward and backward once, and each call copies new q, k, v into the captured
    tensors and replays. ``graphed_fwd_*`` / ``graphed_fwd_bwd_*`` as for the eager call;
    ``graphed_max_err``: the largest difference of the replayed output and gradients from the
    eager call's (zero when the replay is exact)."""
    graphed = torch.cuda.make_graphed_callables(call, (q, k, v))
    fresh = tuple(t.detach().clone().requires_grad_(True) for t in (q, k, v))  # a step's new tensors
    fwd = lambda: graphed(*fresh)  # noqa: E731
    fwd_bwd = lambda: torch.autograd.grad(graphed(*fresh), fresh, go)  # noqa: E731
    want = with_grads(call(*fresh), fresh, go)
    got = (graphed(*fresh).detach().clone(), *fwd_bwd())
    rows = {"graphed_max_err": max_err(got, want)}
    return {**rows, **host_and_sync("graphed_fwd", fwd, calls, device), **host_and_sync("graphed_fwd_bwd", fwd_bwd, calls, device)}


def probe_sdpa(shape, args, device) -> dict:
    B, H, Hkv, D, T = shape
    q = torch.randn((B, H, T, D), device=device, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn((B, Hkv, T, D), device=device, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    go = torch.randn_like(q)
    gqa = dict(enable_gqa=True) if H != Hkv else {}
    sdpa = lambda q_, k_, v_: F.scaled_dot_product_attention(q_, k_, v_, is_causal=True, **gqa)  # noqa: E731
    rows = {
        **host_and_sync("call_fwd", lambda: sdpa(q, k, v), args.calls, device),
        **host_and_sync("call_fwd_bwd", lambda: torch.autograd.grad(sdpa(q, k, v), (q, k, v), go), args.calls, device),
    }
    if args.graphed:
        rows.update(probe_graphed(sdpa, q, k, v, go, device, args.calls))
    return rows


def _shape(text: str) -> tuple[int, ...]:
    parts = tuple(int(p) for p in text.split("x"))
    if len(parts) != 5:
        raise argparse.ArgumentTypeError(f"a shape is BxHxHkvxDxT, got {text!r}")
    return parts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory for probe_host.json")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated BxHxHkvxDxT")
    ap.add_argument("--patterns", default=",".join(PATTERNS), help=f"comma-separated, from {','.join(PATTERNS)}")
    ap.add_argument("--stat", default="mean", choices=("mean", "median"))
    ap.add_argument("--backend", default="triton", choices=("triton", "auto"),
                    help="the op's backend: triton (its own index builder) or auto (the planner picks the builder)")
    ap.add_argument("--graphed", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the call replayed from CUDA graphs (torch.cuda.make_graphed_callables; GPU only)")
    ap.add_argument("--replay", action=argparse.BooleanOptionalAction, default=True,
                    help="also time the calls of an op compiled with cuda_graphs=True (GPU only)")
    ap.add_argument("--stub-kernels", action=argparse.BooleanOptionalAction, default=None,
                    help="launch no kernel, count launches (TRITON_INTERPRET=1 only; default on with --device cpu)")
    ap.add_argument("--autograd-threads", action=argparse.BooleanOptionalAction, default=True,
                    help="run backward passes on autograd's device thread (torch's default); --no-autograd-threads: "
                         "on the calling thread (torch.autograd.set_multithreading_enabled(False))")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    interpret = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if device.type == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA GPU here: run on a GPU with TRITON_INTERPRET=0, or on the CPU with TRITON_INTERPRET=1 --device cpu")
    if device.type == "cuda" and interpret:
        ap.error("TRITON_INTERPRET=1 with --device cuda would time the interpreter: set TRITON_INTERPRET=0")
    if device.type == "cpu" and not interpret:
        ap.error("--device cpu needs TRITON_INTERPRET=1 (the Triton backend runs on the CPU only in its interpreter)")
    STAT[0] = args.stat
    stub = device.type == "cpu" if args.stub_kernels is None else args.stub_kernels
    names = args.patterns.split(",")
    if bad := [n for n in names if n not in PATTERNS]:
        ap.error(f"unknown patterns {bad}; known: {list(PATTERNS)}")
    shapes = [_shape(s) for s in args.shapes.split(",")]
    counter = LaunchCounter(stub)
    results = []
    with counter.installed(), torch.autograd.set_multithreading_enabled(args.autograd_threads):
        for shape in shapes:
            label = "x".join(map(str, shape))
            for name in names:
                rows = probe_pattern(name, PATTERNS[name], shape, args, device, counter)
                results.append({"shape": label, "pattern": name, **rows})
                print(label, name, {k: round(v, 1) if isinstance(v, float) else v for k, v in rows.items()}, flush=True)
            if device.type == "cuda":
                rows = probe_sdpa(shape, args, device)
                results.append({"shape": label, "pattern": "sdpa", **rows})
                print(label, "sdpa", {k: round(v, 1) if isinstance(v, float) else v for k, v in rows.items()}, flush=True)
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "stub_kernels": stub,
        "backend": args.backend,
        "calls": args.calls,
        "stat": args.stat,
        "autograd_threads": args.autograd_threads,
        "dtype": "bfloat16",
        "causal": True,
        "shape": "B x H x Hkv x D x T",
        "unit": "us (launches_*: launches per call)",
        "cmd": " ".join(sys.argv),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "probe_host.json").write_text(json.dumps({"meta": meta, "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
