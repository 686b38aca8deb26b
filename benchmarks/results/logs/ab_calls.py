"""A change's host time on and off, call by call: for #12's A/Bs of host-side changes, whose
effect (tens of microseconds) is smaller than the drift between two rounds of one process
(call_times.py's rounds moved a row's host median by up to 300 µs in run 176).

Each pair of calls runs the mode once with the change on and once with it off (``call_times.ab_arms``,
the order alternating pair by pair), each call started on an idle GPU; per mode it reports
the medians on and off, the median of the pairs' differences (on - off) with its 95%
bootstrap interval, and the share of pairs where "on" took less. Host time first (the call
alone), then the same for the synchronized time (the call and a synchronize after it). The
modes are call_times.py's (its ``calls_of``), so are the inputs.

    python3 ab_calls.py --ab bound-decide --shapes 1x16x16x64x4096 --patterns hash16,hybrid \\
        --modes fwd_decide_nograd,fwd_bwd_decide --pairs 300 --out OUT.json
"""

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import call_times  # noqa: E402


def paired(fn, turned, pairs: int, sync_after: bool) -> dict:
    on, off = [], []
    for i in range(pairs):
        for change_off in ((False, True) if i % 2 == 0 else (True, False)):
            with turned(change_off):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                fn()
                if sync_after:
                    torch.cuda.synchronize()
                (off if change_off else on).append(1e6 * (time.perf_counter() - t0))
    diffs = [a - b for a, b in zip(on, off)]
    rng = random.Random(0)
    boot = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(1000))
    return {"on": round(statistics.median(on), 1), "off": round(statistics.median(off), 1),
            "diff": round(statistics.median(diffs), 1), "ci95": [round(boot[25], 1), round(boot[974], 1)],
            "on_faster": round(sum(d < 0 for d in diffs) / len(diffs), 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ab", required=True, choices=sorted(call_times.SWITCHES | call_times.ENABLES))
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--patterns", required=True)
    ap.add_argument("--modes", required=True)
    ap.add_argument("--pairs", type=int, default=300)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--config", help='TileConfig fields for the whole process, as \'{"dkdv_split": 4}\'')
    args = ap.parse_args()
    call_times.configured(args.config)
    torch.autograd.set_multithreading_enabled(False)  # as call_times.py
    call_times.WANT.update(args.modes.split(","))
    turned = call_times.ab_arms(args.ab)
    out = {"meta": {"argv": sys.argv[1:], "torch": torch.__version__, "device": torch.cuda.get_device_name(),
                    "unit": "us per call; diff: median of (on - off) over pairs, ci95 its bootstrap interval"}, "rows": {}}
    for shape in args.shapes.split(","):
        rows = call_times.calls_of(shape, args.patterns.split(","))
        for key, fns in rows.items():
            if "/sdpa_" in key:
                continue
            for mode, fn in fns.items():
                for change_off in (False, True):  # compile and warm up both ways
                    with turned(change_off):
                        for _ in range(5):
                            fn()
                rec = {"host": paired(fn, turned, args.pairs, False), "sync": paired(fn, turned, args.pairs // 2, True)}
                out["rows"].setdefault(key, {})[mode] = rec
                h, s = rec["host"], rec["sync"]
                print(f"{key[-32:]:32} {mode:18} host on {h['on']:6.0f} off {h['off']:6.0f} diff {h['diff']:6.0f} "
                      f"{h['ci95']} ({h['on_faster']:.0%} faster) | sync diff {s['diff']:6.0f} {s['ci95']}", flush=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
