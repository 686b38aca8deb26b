"""Every call timed three ways against cuDNN and flash SDPA: the figures #12's goals are stated in.

Per pattern and shape (bf16, causal, ``backend="triton"``; a pattern named ``NAME@BACKEND``, as
``topk8@auto``, compiled with that backend), the modes ``--modes`` names: with
decisions given (trusted, from ``attn.decide``) the forward (``fwd``, inputs needing gradients)
and the forward+backward (``fwd_bwd``, ``torch.autograd.grad`` with a fixed output gradient);
with decisions made in the call, the forward under ``torch.no_grad()`` (``fwd_decide_nograd``)
and the forward+backward (``fwd_bwd_decide``, a training step's call); and the forward with the
same decisions given as a user's own tensors (``fwd_checked``, and ``fwd_bwd_checked`` with the
backward: clones, not trusted, so their ids are checked on the device every call). Each in
microseconds per call:

- ``host``: the median of ``--calls`` calls, each started on an idle device (a synchronize
  before it, not timed): the host time to enqueue one call;
- ``b2b``: calls back to back (``tilesparse.bench.timing.time_call``: ``do_bench``): the GPU's
  time once the host keeps ahead;
- ``sync``: the median of ``--calls`` calls with a synchronize after each
  (``tilesparse.bench.timing.synchronized_ms``): what a step that waits on its result sees.

cuDNN's and flash's SDPA are timed the same way in the same process, at each shape. Autograd's
device thread is off (``torch.autograd.set_multithreading_enabled(False)``, as the README
advises for host-bound steps) unless ``--autograd-threads``.

Compiling a pattern's kernels takes tens of seconds; timing it, a few. So that many processes
can compile at once and still time one at a time on an idle host, ``--lock DIR`` makes each
process compile (warm up) first, wait until ``--expect`` processes have, then time every row
while holding an exclusive lock on ``DIR/lock``, ``--rounds`` times (the processes take turns),
and wait again before exiting (no CUDA context is torn down while another process times).
Each figure is the median over the rounds, every round's figures beside it. One process per
pattern and shape:

    for p in keep0.5 hash16 ...; do python3 benchmarks/call_times.py --patterns $p --shapes 1x16x16x64x4096 \\
        --lock $DIR --expect N --rounds 4 --out $DIR/$p.json & done; wait
    python3 benchmarks/call_times.py --merge $DIR/*.json --out call_times.json

``--ab NAME`` times a change on and off in each process (:data:`SWITCHES` holds the context
manager that turns it off; ``index-pool``: index buffers lent per call, ``backends/buffers.py``;
``fused-sort``: the index build's keys and scatter in one launch, ``backends/triton/index.py``;
``bound-decide``: a call's decisions made by steps bound once per signature, ``tilesparse/decide.py``;
``bound-checks``: given ids' device checks bound once per op and layout, ``patterns/decision_errors.py``;
``bound-features``: TopKFeatures' q~ and k~ launches bound once per signature, ``backends/triton/features.py``;
``paired-features``: those launches both sides in one, forward and backward (same file);
``bound-hash``: the ``lsh`` hashing launch bound once per signature, ``backends/triton/hashing.py``;
``local-sanitize``: the Triton forward at D <= 64 sanitizing in its own launch (on calls of
at most 4,096 keys: longer ones launch the pair either way); ``folded-poison``: given ids'
poison folded into the Triton forward's stored output and lse, ``tilesparse/execute.py``;
``dense-heads``: a PerHead's dense heads fused into a group built by the index build's sort
launch itself (not from decisions copied and filled every call), ``backends/triton/index.py``;
``fixed-args``: the attention and index launches handed a kept group's index tensors as one
``launch.Fixed`` block, read once, ``backends/triton/launch.py``; ``kept-identity``: an identity
layout's index tensors built by a pool entry's first call only, later calls zeroing the
non-finite flags with one fill, ``backends/triton/index.py``; ``sites``: launches from a
``launch.Site`` keyed by their per-call tensors' dtypes, their block and their scalars, not by
every argument, ``backends/triton/launch.py``; ``split``: the Triton forward's and dQ's query
blocks split over windows of their key tiles on short calls (``TileConfig.fwd_split``,
``dq_split``); and, from
:data:`ENABLES`, a change not taken: ``merged-sanitize``, the backward's two sanitizing
variants in one launch; both ``backends/triton/nonfinite.py``):
every round times each mode both ways, which goes first alternating by round, the modes with
the change off suffixed ``@off``: an A/B within one process, where the host's speed is shared.

``--merge`` writes the pattern rows of several files into one, each with the SDPA rows its own
process timed, and prints per row each time against cuDNN's (synchronized) and the host time
against the goals (0.15 ms forward, 0.3 ms forward+backward). ``--device cpu`` (with
``TRITON_INTERPRET=1``) runs the script on the CPU at small sizes, float32, against the math
SDPA: a check that it runs, not a measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import tilesparse as ts  # noqa: E402
from tilesparse.bench.grid import PATTERNS  # noqa: E402
from tilesparse.backends.buffers import unpooled  # noqa: E402
from tilesparse.backends.triton.index import rebuilt_identity, separate_sort  # noqa: E402
from tilesparse.backends.triton.features import sides_apart, unbound_features  # noqa: E402
from tilesparse.backends.triton.hashing import unbound_hashing  # noqa: E402
from tilesparse.backends.triton.launch import inline_fixed, keyed_launches  # noqa: E402
from tilesparse.backends.triton.nonfinite import merged_sanitize, sanitize_in_pairs  # noqa: E402
from tilesparse.backends.triton.op import override_config, unsplit_blocks, unsplit_key_blocks  # noqa: E402
from tilesparse.decide import unbound_decide  # noqa: E402
from tilesparse.execute import filled_dense_heads, unfolded_poison  # noqa: E402
from tilesparse.patterns.decision_errors import unbound_checks  # noqa: E402
from tilesparse.bench.timing import host_us, sync, synchronized_ms, time_call  # noqa: E402

DEVICE = torch.device("cuda")
# the SDPA baselines timed beside every row: cuDNN's and flash's on CUDA, the math one on the CPU
SDPA = {"cuda": (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)),
        "cpu": (("math", SDPBackend.MATH),)}
GOAL_US = {"fwd": 150.0, "fwd_bwd": 300.0}
MODES = ("fwd", "fwd_bwd", "fwd_decide_nograd", "fwd_bwd_decide", "fwd_checked", "fwd_bwd_checked")
BASE = {"fwd_decide_nograd": "fwd", "fwd_bwd_decide": "fwd_bwd", "fwd_checked": "fwd", "fwd_bwd_checked": "fwd_bwd"}  # the goal a mode is held to
# --ab NAME: a change timed on and off in one process, round by round: the context manager
# that turns it off
SWITCHES = {"index-pool": unpooled, "fused-sort": separate_sort, "bound-decide": unbound_decide,
            "bound-checks": unbound_checks, "bound-features": unbound_features, "bound-hash": unbound_hashing,
            "local-sanitize": sanitize_in_pairs, "folded-poison": unfolded_poison, "dense-heads": filled_dense_heads,
            "fixed-args": inline_fixed, "kept-identity": rebuilt_identity, "sites": keyed_launches,
            "split": unsplit_blocks, "split-dkdv": unsplit_key_blocks, "paired-features": sides_apart}
# --ab NAME for a change not taken yet (off unless asked for): the context manager that turns it on
ENABLES = {"merged-sanitize": merged_sanitize}


_HELD: list = []  # configured()'s contexts: a collected one would restore the configuration


def configured(text: str | None) -> None:
    """``--config``: TileConfig fields (a JSON object, as ``'{"dkdv_split": 4}'``) in force for
    the rest of the process: a configuration not taken by default, timed with its --ab switch."""
    if text:
        _HELD.append(override_config(**json.loads(text)))
        _HELD[-1].__enter__()


def ab_arms(name: str | None):
    """``turned(off)`` for the --ab change ``name``: the context in which it is off (``off``)
    or on; without a change, a context that changes nothing."""
    if name is None:
        return lambda off: contextlib.nullcontext()
    if name in SWITCHES:
        return lambda off: SWITCHES[name]() if off else contextlib.nullcontext()
    return lambda off: contextlib.nullcontext() if off else ENABLES[name]()


OFF = "@off"  # suffix of a mode timed with the --ab change turned off
WANT: set[str] = set()  # --modes


def three(fn, calls: int) -> dict:
    b2b = 1e3 * time_call(fn, DEVICE, warmup_ms=25, rep_ms=100, min_reps=20, cpu_reps=0)[0]
    host = host_us(fn, DEVICE, calls, stat="median", warmup=0)  # from an idle device
    return {"host": round(host, 1), "b2b": round(b2b, 1),
            "sync": round(1e3 * synchronized_ms(fn, DEVICE, calls=calls), 1)}


def compiled(name: str) -> ts.CompiledAttention:
    """The op a row's pattern name compiles to: ``NAME@BACKEND`` with that backend ("topk8@auto":
    the one a default compile picks), a plain name with the Triton backend."""
    pattern, _, backend = name.partition("@")
    return ts.compile(PATTERNS[pattern].spec, causal=True, backend=backend or "triton")


def calls_of(shape: str, names: list[str]) -> dict[str, dict]:
    """Per row (``shape/pattern``), its mode's callables; inputs made once per shape."""
    B, H, Hkv, D, T = (int(x) for x in shape.split("x"))
    dev = DEVICE
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32  # the CPU smoke run: the interpreter's dtype
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=dtype, generator=g).requires_grad_(True)
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=dtype, generator=g).requires_grad_(True) for _ in range(2))
    go = torch.randn_like(q)
    label = f"B{B}_H{H}_Hkv{Hkv}_D{D}_T{T}"
    rows: dict[str, dict] = {}
    for name in names:
        attn = compiled(name)
        dec = attn.decide(q, k)
        # the same decisions as a user's own tensors: not trusted, so each call checks their ids
        given = ts.Decisions(**{n: t.clone() for n, t in dec.items() if t is not None})

        def made(attn=attn):
            with torch.no_grad():
                return attn(q, k, v)

        rows[f"{label}/{name}"] = {
            "fwd": lambda attn=attn, dec=dec: attn(q, k, v, decisions=dec),
            "fwd_bwd": lambda attn=attn, dec=dec: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go),
            "fwd_decide_nograd": made,
            "fwd_bwd_decide": lambda attn=attn: torch.autograd.grad(attn(q, k, v), (q, k, v), go),
            "fwd_checked": lambda attn=attn, given=given: attn(q, k, v, decisions=given),
            "fwd_bwd_checked": lambda attn=attn, given=given: torch.autograd.grad(attn(q, k, v, decisions=given),
                                                                                  (q, k, v), go),
        }
        rows[f"{label}/{name}"] = {m: f for m, f in rows[f"{label}/{name}"].items() if m in WANT}
    for sdpa_label, backend in SDPA[dev.type]:
        def sdpa(backend=backend):
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)

        rows[f"{label}/sdpa_{sdpa_label}"] = {
            "fwd": sdpa,
            "fwd_bwd": lambda sdpa=sdpa: torch.autograd.grad(sdpa(), (q, k, v), go),
        }
    return rows


def _wait_for(lock_dir: Path, prefix: str, expect: int, wait_s: float) -> None:
    """Mark this process at ``prefix`` in ``lock_dir`` and wait until ``expect`` processes have
    (or ``wait_s`` passed: a process that died does not hold the others forever)."""
    (lock_dir / f"{prefix}.{os.getpid()}").touch()
    end = time.monotonic() + wait_s
    while len(list(lock_dir.glob(f"{prefix}.*"))) < expect and time.monotonic() < end:
        time.sleep(0.5)


@contextlib.contextmanager
def turn(lock_dir: Path | None):
    """Hold the exclusive lock on ``lock_dir/lock`` (no lock without ``lock_dir``)."""
    if lock_dir is None:
        yield
        return
    with open(lock_dir / "lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(args) -> None:
    torch.autograd.set_multithreading_enabled(args.autograd_threads)
    rows = {}
    for shape in args.shapes.split(","):
        rows.update(calls_of(shape, args.patterns.split(",")))
    t0 = time.perf_counter()
    turned = ab_arms(args.ab)
    both = (False,) if args.ab is None else (False, True)  # the --ab change on, then off

    for fns in rows.values():  # compile and warm up every call (with the --ab change off too) before taking a turn
        for off in both:
            with turned(off):
                for fn in fns.values():
                    for _ in range(args.warmup):
                        fn()
    sync(DEVICE)
    warm_s = time.perf_counter() - t0
    if args.lock is not None:
        args.lock.mkdir(parents=True, exist_ok=True)
        _wait_for(args.lock, "ready", args.expect, args.wait_s)
    rounds: dict[str, list] = {key: [] for key in rows}
    for r in range(args.rounds):
        # with --ab, the change on and off, in turns: which goes first alternates by round
        offs = both[:: 1 if r % 2 == 0 else -1]
        with turn(args.lock):
            for key, fns in rows.items():
                rec = {}
                for off in offs:
                    with turned(off):
                        rec.update({mode + (OFF if off else ""): three(fn, args.calls) for mode, fn in fns.items()})
                rounds[key].append(rec)
                print(f"round {r}", key, rounds[key][-1], flush=True)
        time.sleep(0.2)  # let a waiting process take the next turn
    # per figure the median over rounds, every round's figures beside it
    out = {
        key: {mode: {m: round(statistics.median(rr[mode][m] for rr in rs), 1) for m in ("host", "b2b", "sync")}
              | {"rounds": [rr[mode] for rr in rs]} for mode in rs[0]}
        for key, rs in rounds.items()
    }
    meta = {"tilesparse": ts.__file__, "torch": torch.__version__,
            "device": torch.cuda.get_device_name() if DEVICE.type == "cuda" else "cpu",
            "autograd_threads": args.autograd_threads, "warm_s": round(warm_s, 1), "argv": sys.argv[1:],
            "unit": f"us per call, the median over {args.rounds} rounds of: host (median of {args.calls} from an "
                    f"idle device), b2b (do_bench, back to back), sync (median of {args.calls}, a synchronize "
                    "after each)"}
    args.out.write_text(json.dumps({"meta": meta, "rows": out}, indent=1))
    if args.lock is not None:  # no process tears its CUDA context down while another times
        _wait_for(args.lock, "done", args.expect, args.wait_s)


def merge(args) -> None:
    """One file of every pattern row, each with the SDPA rows its own process timed."""
    rows, metas = {}, []
    for p in args.merge:
        d = json.loads(Path(p).read_text())
        metas.append(d["meta"])
        for key, r in d["rows"].items():
            shape, name = key.split("/")
            if not name.startswith("sdpa_"):
                rows[key] = {**r, **{n.split("/")[1]: b for n, b in d["rows"].items() if n.startswith(f"{shape}/sdpa_")}}
    args.out.write_text(json.dumps({"meta": metas, "rows": rows}, indent=1))
    print(f"{'row':>34} {'mode':>21} | host  b2b sync us | SDPA sync  | sync/SDPA  | sync/b2b | host/goal "
          "(SDPA: cuDNN's; the math one on the CPU)")
    for key in sorted(rows):
        for mode in (m + off for m in MODES for off in ("", OFF)):
            c = rows[key].get(mode)
            if c is None:
                continue
            base = mode.removesuffix(OFF)
            base = BASE.get(base, base)
            ref = rows[key].get("sdpa_cudnn", rows[key].get("sdpa_math"))[base]["sync"]
            print(f"{key[-34:]:>34} {mode:>21} | {c['host']:4.0f} {c['b2b']:4.0f} {c['sync']:4.0f}    | {ref:10.0f} | "
                  f"{c['sync'] / ref:10.2f} | {c['sync'] / c['b2b']:8.2f} | {c['host'] / GOAL_US[base]:9.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="1x16x16x64x4096,1x32x8x128x4096", help="comma-separated BxHxHkvxDxT")
    ap.add_argument("--patterns", default="dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8",
                    help=f"comma-separated, from {','.join(PATTERNS)}")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--modes", default="fwd,fwd_bwd,fwd_decide_nograd", help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--warmup", type=int, default=5, help="untimed calls of each row first (compiling)")
    ap.add_argument("--rounds", type=int, default=1, help="turns at timing every row (with --lock, processes take turns)")
    ap.add_argument("--autograd-threads", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--lock", type=Path, help="directory: compile first, then time holding its lock")
    ap.add_argument("--expect", type=int, default=1, help="processes to wait for before timing (--lock)")
    ap.add_argument("--wait-s", type=float, default=300.0, help="the longest wait for them")
    ap.add_argument("--merge", nargs="+", help="JSON files of this script to merge into --out")
    ap.add_argument("--ab", choices=sorted(SWITCHES | ENABLES),
                    help=f"time every mode also with this change off (modes suffixed {OFF}), in turns each round")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a smoke run of the script itself (TRITON_INTERPRET=1, float32; no figure to report)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(args.device)
    if bad := set(args.modes.split(",")) - set(MODES):
        raise SystemExit(f"--modes: unknown {sorted(bad)}; known: {', '.join(MODES)}")
    WANT.update(args.modes.split(","))
    if args.merge:
        merge(args)
    else:
        if DEVICE.type == "cuda" and not torch.cuda.is_available():
            raise SystemExit("call_times.py times CUDA calls: no CUDA device")
        run(args)


if __name__ == "__main__":
    main()
