#!/bin/bash
# After run 118 (three loops from 1,024-row segments at D=128, adopted): 512-row segments, Hash(64) at 32k, which
# were 3.5% slower in three loops (round 9) before the dK/dV kernel became the warp-specialized one. A/B/A/B,
# kernels alone
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag round12_long512 \
  --shapes "1,32,8,128,32768;2,12,12,128,32768" --patterns hash64 \
  --configs @benchmarks/sweeps/round12_long512.json > $R/sweep_round12_long512.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/sweep_round12_long512.log | cut -c1-200
