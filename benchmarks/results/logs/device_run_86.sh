#!/bin/bash
# round 9, second half: which of the two switches made run 85's Hash(16) faster (three-phase loops
# alone, against with dP first); kernels alone, Hash(16) only
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 100 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round9_hash_b --shapes 1,32,8,128,32768 \
  --patterns hash16 --configs @benchmarks/sweeps/d128_round9_hash_b.json > $R/sweep_d128_round9_hash_b.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/sweep_d128_round9_hash_b.log | cut -c1-200
