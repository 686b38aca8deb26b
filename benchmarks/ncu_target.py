"""One forward+backward of a pattern (or of cuDNN's dense SDPA) at a model shape, for Nsight Compute.

B=1, H=32, Hkv=8, D=128, bf16, causal, decisions given, the Triton backend with its defaults
(the Gluon kernels where they run); ``cudnn`` is torch's SDPA on cuDNN over the same q, k, v
(``enable_gqa``). Two warm-up calls, then one call between ``cudaProfilerStart``/``Stop`` so
``ncu --profile-from-start off`` reads the kernels of exactly one call::

    ncu --clock-control none --profile-from-start off --kernel-name regex:"_attn_" \\
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \\
        --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \\
        python3 benchmarks/ncu_target.py keep0.7 16384
"""

import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # run from a checkout

import tilesparse as ts  # noqa: E402

SPECS = {"keep0.7": ts.QKDrop(keep=0.7), "hash16": ts.Hash(buckets=16)}


def main() -> None:
    name, T = sys.argv[1], int(sys.argv[2])
    if name not in SPECS and name != "cudnn":
        raise SystemExit(f"pattern must be one of {sorted(SPECS) + ['cudnn']}, got {name!r}")
    B, H, Hkv, D = 1, 32, 8, 128
    dev = torch.device("cuda")
    g = torch.Generator(dev).manual_seed(0)
    q = torch.randn((B, H, T, D), device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k, v = (torch.randn((B, Hkv, T, D), device=dev, dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
    if name == "cudnn":

        def call():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    else:
        attn = ts.compile(SPECS[name], causal=True, backend="triton", validate=False)
        dec = attn.decide(q, k, generator=g)

        def call():
            return attn(q, k, v, decisions=dec)

    go = torch.randn_like(q)
    for _ in range(2):
        torch.autograd.grad(call(), (q, k, v), go)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    torch.autograd.grad(call(), (q, k, v), go)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
