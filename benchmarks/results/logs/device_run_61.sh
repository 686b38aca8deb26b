#!/bin/bash
# D=64: 128-wide forward tiles in groups without a bucket predicate, 64-wide where buckets cut
# the segments short (TileConfig.bucket_fwd_n; an earlier sweep had QKDrop(0.7)'s forward 6%
# faster and Hash(16)'s 48% slower at 128), kernels alone at the D=64 target shape
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d64_round5 --shapes 2,12,12,64,16384 \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hybrid --configs @benchmarks/sweeps/d64_round5.json > $R/sweep_d64_round5.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"; tail -10 $R/sweep_d64_round5.log
