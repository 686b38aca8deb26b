#!/bin/bash
# Why the automatic plan's Hybrid forward at B=2, H=12, D=64, T=32,768 (CuPy's index build) is
# 22-29% slower than Triton's builder (runs 88-89): each builder's index kernels, the forward
# call's kernels and the synchronized forward, at that shape and at the model shape
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
show() { python3 -c "
import json, sys
for l in sys.stdin:
    if l.startswith('{'):
        r = json.loads(l); print(r['shape'], r['T'], r['pattern'], r['backend'], r['builders'], r['total_ms'], r['fwd_ms'], r['fwd_kernels_ms'])"; }
timeout 150 python3 benchmarks/results/logs/index_kernels.py $R/index_kernels_d64_run90_h200.jsonl --shape 2,12,12,64 \
  --ts 16384,32768 --specs hash16,hybrid,keep0.7 2>&1 | show
timeout 100 python3 benchmarks/results/logs/index_kernels.py $R/index_kernels_d128_run90_h200.jsonl --ts 32768 \
  --specs hash16,hybrid 2>&1 | show
echo "t=$(( $(date +%s) - T0 ))"
