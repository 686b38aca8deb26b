"""Host time of the SDPA backend's priority switch around one call: torch's
``sdpa_kernel(CUDA_PRIORITY, set_priority=True)`` (what backends/sdpa.py entered before) against
``backends.sdpa.cudnn_first``, each around an empty call and around a cuDNN forward (bf16, B=1,
H=16, D=64, T=256, causal, not synchronized: host time only, the GPU's work shorter than it), 5
rounds of 2,000 alternating; medians of the rounds in microseconds.

    python3 sdpa_priority_host.py OUT.json
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

from tilesparse.backends.sdpa import CUDA_PRIORITY, cudnn_first


def _old(attend):
    with sdpa_kernel(CUDA_PRIORITY, set_priority=True):
        return attend()


def main(out: str) -> None:
    q, k, v = (torch.randn((1, 16, 256, 64), device="cuda", dtype=torch.bfloat16) for _ in range(3))
    calls = {"empty": lambda: None, "cudnn_fwd": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)}
    res = {}
    for name, attend in calls.items():
        rounds = {"sdpa_kernel": [], "cudnn_first": [], "bare": []}
        for _ in range(5):
            for arm, fn in (("sdpa_kernel", _old), ("cudnn_first", cudnn_first), ("bare", lambda a: a())):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(2000):
                    fn(attend)
                rounds[arm].append((time.perf_counter() - t0) / 2000 * 1e6)
                torch.cuda.synchronize()
        res[name] = {arm: {"median_us": statistics.median(r), "rounds_us": r} for arm, r in rounds.items()}
        print(name, {arm: round(v["median_us"], 2) for arm, v in res[name].items()}, flush=True)
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "results": res}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
