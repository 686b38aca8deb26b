"""Whether a long call runs at the GPU's power limit (#11, run 84): the SM clock, power and
temperature that ``nvidia-smi`` samples every 100 ms while one forward+backward step runs back
to back for a few seconds, per configuration, with the step's and each kernel's mean GPU time.

Run 82 timed the forward and dQ kernels, which ``dp_first`` does not change, 4-6% slower in the
configurations where the dK/dV kernel issued dP first (T=32,768): a faster dK/dV kernel drawing
more power, with the clock lowered for every kernel after it, would do that. The configurations
run A/B/A/B, then cuDNN's dense step as the reference.

    python3 benchmarks/results/logs/diag_power.py 1,32,8,128,32768 keep0.7 $OUT/r/diag_power.json
"""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_models import PATTERNS, bf16_inputs, kernel_ms, run_header  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.backends.triton.op import override_config  # noqa: E402

SECONDS = 6.0  # each configuration's sustained run; its first second is left out of the means
QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu,power.limit"


def sustained(step) -> dict:
    """Run ``step`` back to back for SECONDS; the wall window and the mean GPU time per step."""
    step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    start.record()
    n = 0
    while time.time() - t0 < SECONDS:
        step()
        n += 1
        if n % 4 == 0:
            torch.cuda.synchronize()  # keep the queue short: the window is the work's
    end.record()
    torch.cuda.synchronize()
    return {"t0": t0, "t1": time.time(), "steps": n, "ms": start.elapsed_time(end) / n}


def window(samples: list[tuple], t0: float, t1: float) -> dict:
    """Means (and the lowest clock) of the samples read from t0 + 1 s to t1."""
    inside = [s for s in samples if t0 + 1.0 <= s[0] <= t1]
    if not inside:
        return {"samples": 0}
    clocks, power, temp, limit = ([s[i] for s in inside] for i in (1, 2, 3, 4))
    return {"samples": len(inside), "sm_mhz": sum(clocks) / len(clocks), "sm_mhz_min": min(clocks),
            "power_w": sum(power) / len(power), "temp_c": max(temp), "power_limit_w": max(limit)}  # fmt: skip


def sample(pipe, samples: list) -> None:
    """Each nvidia-smi line as (seconds since the epoch, its values). Its timestamp is local time
    ("2026/12/01 22:55:01.123"), which ``time.mktime`` reads as such (the pipe may deliver lines
    late, so their arrival is not their time)."""
    for line in pipe:
        stamp, *values = (x.strip() for x in line.split(","))
        try:
            whole, _, frac = stamp.partition(".")
            t = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + float("0." + (frac or "0"))
            samples.append((t, *(float(x) for x in values)))
        except ValueError:
            continue


if __name__ == "__main__":
    shape, pattern, out = sys.argv[1], sys.argv[2], sys.argv[3]
    (B, H, Hkv, D, T), q, k, v, go = bf16_inputs(shape)
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "100"],
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    samples: list[tuple] = []
    reader = threading.Thread(target=sample, args=(smi.stdout, samples), daemon=True)
    reader.start()
    runs = []
    attn = ts.compile(PATTERNS[pattern], causal=True, backend="triton")
    dec = attn.decide(q.detach(), k.detach(), generator=torch.Generator(q.device).manual_seed(1))
    for over in ({"dp_first": 0}, {}, {"dp_first": 0}, {}):
        with override_config(**over):
            op = ts.compile(PATTERNS[pattern], causal=True, backend="triton")  # a fresh plan per config
            step = lambda: torch.autograd.grad(op(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
            run = {"name": pattern, "override": over, **sustained(step), "kernels": kernel_ms(step)}
        runs.append(run)
        print(json.dumps(run), flush=True)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        step = lambda: torch.autograd.grad(  # noqa: E731
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H), (q, k, v), go)
        runs.append({"name": "cudnn", "override": None, **sustained(step)})
    time.sleep(0.5)
    smi.terminate()
    reader.join(timeout=2)
    for run in runs:
        run["gpu"] = window(samples, run["t0"], run["t1"])
    res = run_header(shape=shape, query=QUERY, runs=runs, samples=samples)
    Path(out).write_text(json.dumps(res, indent=1))
    print(f"{'name':8s} {'override':16s} {'ms/step':>8s} {'fwd':>6s} {'dq':>6s} {'dkdv':>6s} {'MHz':>6s} {'min':>5s} "
          f"{'W':>5s} {'cap':>5s} {'C':>3s}")  # fmt: skip
    for r in runs:
        kn, g = r.get("kernels", {}), r["gpu"]
        print(f"{r['name']:8s} {json.dumps(r['override']):16s} {r['ms']:8.2f} {kn.get('_attn_fwd', 0):6.2f} "
              f"{kn.get('_attn_bwd_dq', 0):6.2f} {kn.get('_attn_bwd_dkdv', 0):6.2f} {g.get('sm_mhz', 0):6.0f} "
              f"{g.get('sm_mhz_min', 0):5.0f} {g.get('power_w', 0):5.0f} {g.get('power_limit_w', 0):5.0f} {g.get('temp_c', 0):3.0f}")
