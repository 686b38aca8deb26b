"""Each call against cuDNN SDPA's, pair by pair: #12's goals compare a sparse call with cuDNN's
dense one, and the GPU's host changes speed from moment to moment (run 180: one process pinned
to one CPU took 150 µs or 290 µs for the same Hash(16) forward, a third of a second apart), so
two calls timed in different stretches, or in different processes, compare the host's phases as
much as the calls. Here each pair runs one call of the pattern and one of cuDNN SDPA at the same
shape back to back (the order alternating), each from an idle GPU; per mode the medians of
both, and the median of the pairs' ratios (ours / cuDNN's), for the host time (the call alone)
and the synchronized time (the call and a synchronize after it). Modes and inputs are
call_times.py's (``fwd``, ``fwd_bwd``: decisions given; ``fwd_bwd_decide``: made in the call;
``fwd_checked``, ``fwd_bwd_checked``: given as a user's own tensors, their ids checked), cuDNN's
forward against the forwards, its forward+backward against the others. One process per
pattern and shape, timing in turns under call_times.py's lock.

    python3 paired_cudnn.py --shapes 1x16x16x64x4096 --patterns hash16 --modes fwd,fwd_bwd \\
        --pairs 150 --lock DIR --expect N --out OUT.json [--config '{"dkdv_split": 4}']
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import call_times  # noqa: E402


def pairs(ours, theirs, n: int, sync_after: bool) -> dict:
    a, b = [], []
    for i in range(n):
        for mine in ((True, False) if i % 2 == 0 else (False, True)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            (ours if mine else theirs)()
            if sync_after:
                torch.cuda.synchronize()
            (a if mine else b).append(1e6 * (time.perf_counter() - t0))
    return {"ours": round(statistics.median(a), 1), "cudnn": round(statistics.median(b), 1),
            "ratio": round(statistics.median(x / y for x, y in zip(a, b)), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--patterns", required=True)
    ap.add_argument("--modes", default="fwd,fwd_bwd,fwd_bwd_decide")
    ap.add_argument("--pairs", type=int, default=150)
    ap.add_argument("--lock", type=Path)
    ap.add_argument("--expect", type=int, default=1)
    ap.add_argument("--wait-s", type=float, default=240.0)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", help='TileConfig fields for the whole process, as \'{"dkdv_split": 4}\'')
    args = ap.parse_args()
    call_times.configured(args.config)
    torch.autograd.set_multithreading_enabled(False)  # as call_times.py
    call_times.WANT.update(args.modes.split(","))
    rows = {}
    for shape in args.shapes.split(","):
        rows.update(call_times.calls_of(shape, args.patterns.split(",")))
    for fns in rows.values():  # compile and warm up
        for fn in fns.values():
            for _ in range(5):
                fn()
    torch.cuda.synchronize()
    if args.lock is not None:
        args.lock.mkdir(parents=True, exist_ok=True)
        call_times._wait_for(args.lock, "ready", args.expect, args.wait_s)
    out = {"meta": {"argv": sys.argv[1:], "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                    "unit": "us per call, medians; ratio: the median of the pairs' ours / cuDNN's"}, "rows": {}}
    with call_times.turn(args.lock):
        for key, fns in rows.items():
            if "/sdpa_" in key:
                continue
            cudnn = rows[key.split("/")[0] + "/sdpa_cudnn"]
            for mode, fn in fns.items():
                ref = cudnn["fwd_bwd" if "bwd" in mode else "fwd"]
                rec = {"host": pairs(fn, ref, args.pairs, False), "sync": pairs(fn, ref, args.pairs, True)}
                out["rows"].setdefault(key, {})[mode] = rec
                h, s = rec["host"], rec["sync"]
                print(f"{key[-32:]:32} {mode:15} host {h['ours']:6.0f} vs {h['cudnn']:5.0f} ({h['ratio']:.2f}x) | "
                      f"sync {s['ours']:6.0f} vs {s['cudnn']:5.0f} ({s['ratio']:.2f}x)", flush=True)
    args.out.write_text(json.dumps(out, indent=1))
    if args.lock is not None:
        call_times._wait_for(args.lock, "done", args.expect, args.wait_s)


if __name__ == "__main__":
    main()
