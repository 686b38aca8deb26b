#!/bin/bash
# D=128 bucket groups take 32-wide forward tiles (round 4: faster where one masked loop runs); with three loops
# from 1,024-row segments (run 119), the forward's full tiles run unmasked as QKDrop's do with 64-wide ones.
# Hash(16) at 16k and 32k (every group three loops), 64-wide forward tiles (bucket_fwd_n=0) against 32, A/B/A/B,
# kernels alone
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag round13_long_fwd64 \
  --shapes "2,12,12,128,16384;1,32,8,128,16384;1,32,8,128,32768" --patterns hash16 \
  --configs @benchmarks/sweeps/round13_long_fwd64.json > $R/sweep_round13_long_fwd64.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -13 $R/sweep_round13_long_fwd64.log | cut -c1-200
