#!/bin/bash
# Three loops from 1,024-row bucket segments (long_segment_rows 2,048 -> 1,024): the rule was set from 2,048-row
# segments (faster) and 512-row ones (slower), before the dK/dV kernel became the warp-specialized one. Hash(16) at
# 16k has 1,024-row segments: the B=2 H=12 D=128 target row (2.16 ms against 2.0), D=128 GQA and D=64.
# A/B/A/B, kernels alone
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag round11_long1024 \
  --shapes "2,12,12,128,16384;1,32,8,128,16384;2,12,12,64,16384" --patterns hash16 \
  --configs @benchmarks/sweeps/round11_long1024.json > $R/sweep_round11_long1024.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -16 $R/sweep_round11_long1024.log | cut -c1-220
