#!/bin/bash
# Hash(16) at D=64 (B=2 H=12) took 52.4 ms at T=131,072 in run 88 against 45.7 in the README's older
# target table: its 8,192-row segments run one masked loop (the three-loop rule is off at D=64).
# A/B/A/B, kernels alone: one loop against three for segments of 2,048 rows or more, at 32k and 131k
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 110 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d64_round10_long \
  --shapes "2,12,12,64,32768;2,12,12,64,131072" --patterns hash16 \
  --configs @benchmarks/sweeps/d64_round10_long.json > $R/sweep_d64_round10_long.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/sweep_d64_round10_long.log | cut -c1-200
