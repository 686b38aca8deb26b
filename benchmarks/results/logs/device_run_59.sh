#!/bin/bash
# spill-free tile candidates (Nsight Compute, run 58: the forward's stalls at D=128 wait on
# spill reloads): 32-wide forward key tiles at 4 warps, 32-row dK/dV query tiles, 16-wide dQ
# key tiles; kernels alone at the target shapes
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 330 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round4 --shapes 1,32,8,128,32768 \
  --patterns keep0.7,keep0.5,hash16,hash64 --configs @benchmarks/sweeps/d128_round4.json > $R/sweep_d128_round4.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"; tail -25 $R/sweep_d128_round4.log
timeout 150 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d64_round4 --shapes 2,12,12,64,16384 \
  --patterns keep0.7,keep0.5,hash16,hash64 --configs @benchmarks/sweeps/d64_round4.json > $R/sweep_d64_round4.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"; tail -12 $R/sweep_d64_round4.log
