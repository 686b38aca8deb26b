#!/bin/bash
# round 7: the split dK/dV kernel over 128-key blocks with 8 warps (each warpgroup 64 key rows;
# no in-loop spill at D=64 or D=128, where the 4-warp 64x64 kernel spills 62; 128x32 fits two
# blocks of 8 warps on an SM), after Nsight Compute found the backward latency-bound at 12.5%
# occupancy (run 77); kernels alone
# (wrong, found after the run: at 172-255 registers a thread one 8-warp block fills most of an SM's 64K registers)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 110 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d64_round7 --shapes 2,12,12,64,16384 \
  --patterns keep0.7,hash16 --configs @benchmarks/sweeps/d64_round7.json > $R/sweep_d64_round7.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"; tail -7 $R/sweep_d64_round7.log | cut -c1-330
timeout 130 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round7 --shapes 1,32,8,128,32768 \
  --patterns keep0.7,hash16 --configs @benchmarks/sweeps/d128_round7.json > $R/sweep_d128_round7.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"; tail -7 $R/sweep_d128_round7.log | cut -c1-330
