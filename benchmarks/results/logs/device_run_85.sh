#!/bin/bash
# round 9: bucket groups at D=128 with three-phase loops and dP first (their compiled dK/dV loops
# then overlap the exponentials with dP's product in every loop, 63 in-loop spills against 26),
# A/B/A/B against today's one masked loop per segment with dP after; kernels alone
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 170 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round9_hash --shapes 1,32,8,128,32768 \
  --patterns hash16,hash64 --configs @benchmarks/sweeps/d128_round9_hash.json > $R/sweep_d128_round9_hash.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/sweep_d128_round9_hash.log | cut -c1-200
