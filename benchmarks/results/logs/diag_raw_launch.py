"""#12: what one kernel launch costs the host through each path, and whole calls with hits
launched by ``cuLaunchKernel`` (launch.RawLaunch) against Triton's launcher, alternated in one
process. RawLaunch was slower and was reverted: this script runs on the tree of commit fb71bee.

``--part launch``: a kernel of 16 pointer and 24 int parameters (the forward kernel's order of
size) that does nothing, grid (1, 1, 1): per launch, the median over rounds of 200 launches
(a synchronize between rounds, not timed), the paths alternated round by round:

- ``triton``: ``kernel[grid](...)``;
- ``lean_triton`` / ``lean_raw``: ``LeanKernel`` hits, through Triton's launcher / a RawLaunch;
- ``prepared``: the lean path's argument key and addresses alone;
- ``run_only`` / ``raw_only``: Triton's launcher / the RawLaunch alone, arguments prepared;
- torch ops a call makes: ``empty`` (int32, CUDA), ``as_strided``, ``zeros2`` (two int32),
  ``apply`` (an identity autograd.Function on a tensor needing grad).

``--part calls``: per pattern and shape, host time (median of ``--calls`` calls from an idle
GPU) and synchronized time of the forward and the forward+backward (decisions given), RawLaunch
on and off alternated ``--rounds`` times; with ``--lock DIR --expect N`` as call_times.py
(processes compile at once, then time in turns). ``--summary OUT FILES...``: the calls files
in one, and a table of the medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tilesparse.backends.triton import launch as L  # noqa: E402
from tilesparse.bench.timing import host_us, synchronized_ms  # noqa: E402

DEV = torch.device("cuda")


@triton.jit
def _nothing(p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15,
             s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15,
             s16, s17, s18, s19, s20, s21, s22, s23, WRITE: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    if WRITE:
        tl.store(p0 + tl.program_id(0), s0 + s23)


class _Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g


def part_launch(rounds: int, per: int) -> dict:
    ptrs = [torch.zeros(4096, dtype=torch.int32, device=DEV)[i * 16:] for i in range(16)]
    ints = [4096 * (i + 1) + (i % 3) for i in range(24)]
    args = (*ptrs, *ints)
    grid = (1, 1, 1)
    consts = dict(WRITE=False, BLOCK=64)
    k = L.LeanKernel(_nothing)
    for _ in range(3):  # compile, then a hit
        k[grid](*args, **consts)
    torch.cuda.synchronize()
    key = (torch.cuda.current_device(), tuple(consts.items()), L.prepared(args)[0])
    run, function, metadata, tail, raw = k.cache[key]
    assert raw is not None, "no RawLaunch was made for the probe kernel"
    run_args = L.prepared(args)[1]
    stream = torch._C._cuda_getCurrentRawStream(0)
    buf = torch.empty(1 << 20, dtype=torch.int32, device=DEV)
    x = torch.zeros(8, device=DEV, requires_grad=True)

    def lean_with(raw_on: bool):
        def f():
            L._RAW[0] = raw_on
            k[grid](*args, **consts)
        return f

    paths = {
        "triton": lambda: _nothing[grid](*args, **consts, **L.OPTIONS),
        "lean_triton": lean_with(False),
        "lean_raw": lean_with(True),
        "prepared": lambda: L.prepared(args),
        "run_only": lambda: run(1, 1, 1, stream, function, metadata, None, None, None, *run_args, *tail),
        "raw_only": lambda: raw(1, 1, 1, stream, run_args),
        "empty": lambda: torch.empty(70000, dtype=torch.int32, device=DEV),
        "as_strided": lambda: buf.as_strided((1, 16, 4096), (65536, 4096, 1), 4096),
        "zeros2": lambda: torch.zeros(2, dtype=torch.int32, device=DEV),
        "apply": lambda: _Identity.apply(x),
    }
    times: dict[str, list[float]] = {n: [] for n in paths}
    for _ in range(rounds):
        for name, fn in paths.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per):
                fn()
            times[name].append((time.perf_counter() - t0) / per * 1e6)
    L._RAW[0] = True
    torch.cuda.synchronize()
    # the raw launch wrote what the normal one would: run both with WRITE=True into two buffers
    outs = []
    for raw_on in (False, True):
        out = torch.zeros(4096, dtype=torch.int32, device=DEV)
        L._RAW[0] = raw_on
        for _ in range(3):
            k[(7, 1, 1)](out, *ptrs[1:], *ints, WRITE=True, BLOCK=64)
        outs.append(out)
    L._RAW[0] = True
    torch.cuda.synchronize()
    same = bool(torch.equal(outs[0], outs[1])) and int(outs[1][:7].eq(ints[0] + ints[23]).sum()) == 7
    return {"per_launch_us": {n: round(statistics.median(t), 2) for n, t in times.items()},
            "rounds_us": {n: [round(v, 2) for v in t] for n, t in times.items()}, "raw_writes_as_normal": same}


def part_calls(args) -> dict:
    import call_times as ct

    torch.autograd.set_multithreading_enabled(False)
    rows = {}
    for shape in args.shapes.split(","):
        rows.update(ct.calls_of(shape, args.patterns.split(",")))
    rows = {k: v for k, v in rows.items() if "/sdpa_" not in k or args.sdpa}
    for fns in rows.values():  # compile and warm both ways
        for mode in ("fwd", "fwd_bwd"):
            for raw_on in (True, False):
                L._RAW[0] = raw_on
                for _ in range(3):
                    fns[mode]()
    torch.cuda.synchronize()
    lock = Path(args.lock) if args.lock else None
    if lock:
        ct._wait_for(lock, "ready", args.expect, 900)
    out: dict = {}
    for r in range(args.rounds):
        with ct.turn(lock):
            for name, fns in rows.items():
                for mode in ("fwd", "fwd_bwd"):
                    order = (True, False) if r % 2 == 0 else (False, True)
                    for raw_on in order:
                        L._RAW[0] = raw_on
                        tag = "raw" if raw_on else "triton"
                        fn = fns[mode]
                        h = host_us(fn, DEV, args.calls, stat="median", warmup=2)
                        s = 1e3 * synchronized_ms(fn, DEV, calls=args.calls)
                        rec = out.setdefault(name, {}).setdefault(f"{mode}_{tag}", {"host": [], "sync": []})
                        rec["host"].append(round(h, 1))
                        rec["sync"].append(round(s, 1))
    L._RAW[0] = True
    if lock:
        ct._wait_for(lock, "done", args.expect, 900)
    return out


def summary(files: list[str], out: str) -> None:
    """The calls files in one, and per row and mode the medians over rounds, raw against Triton's launcher."""
    merged: dict = {}
    for f in files:
        d = json.loads(Path(f).read_text())
        merged.update({k: v for k, v in d.items() if k != "meta"})
    Path(out).write_text(json.dumps(merged, indent=1))
    print(f"{'row':44} {'mode':8} {'host raw':>9} {'triton':>8} {'sync raw':>9} {'triton':>8}")
    for name, rec in sorted(merged.items()):
        for mode in ("fwd", "fwd_bwd"):
            r, t = rec[f"{mode}_raw"], rec[f"{mode}_triton"]
            med = statistics.median
            print(f"{name:44} {mode:8} {med(r['host']):9.1f} {med(t['host']):8.1f} {med(r['sync']):9.1f} {med(t['sync']):8.1f}")


def main() -> None:
    if sys.argv[1:2] == ["--summary"]:
        summary(sys.argv[3:], sys.argv[2])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("launch", "calls"), required=True)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--per", type=int, default=200)
    p.add_argument("--shapes", default="1x16x16x64x4096")
    p.add_argument("--patterns", default="hash16")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--sdpa", action="store_true")
    p.add_argument("--lock")
    p.add_argument("--expect", type=int, default=1)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    res = part_launch(args.rounds, args.per) if args.part == "launch" else part_calls(args)
    res = {"meta": {"cmd": " ".join(sys.argv), "torch": torch.__version__, "triton": triton.__version__,
                    "device": torch.cuda.get_device_name()}, **res}  # fmt: skip
    Path(args.out).write_text(json.dumps(res, indent=1))
    if args.part == "launch":
        print("per launch / op, us:", json.dumps(res["per_launch_us"]), "| raw writes as normal:", res["raw_writes_as_normal"])


if __name__ == "__main__":
    main()
