#!/bin/bash
# a fused backward (TileConfig.fused_bwd: the dK/dV kernel adds each tile's dQ with fp32 atomics,
# no dQ kernel) against the split one, kernels alone, gradients compared with the split's: round 6
# at D=128 (B=1, H=32, Hkv=8, T=32,768) and D=64 (B=2, H=12, T=16,384); configs are the ones that
# compile for sm_90 without in-loop spills (or with few)
# (the fused kernel is not in the code: `git apply benchmarks/results/logs/fused_bwd_run71.patch` first to rerun)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 240 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d64_round6 --shapes 2,12,12,64,16384 \
  --patterns keep0.7,keep0.5,hash16 --configs @benchmarks/sweeps/d64_round6.json > $R/sweep_d64_round6.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"; tail -20 $R/sweep_d64_round6.log | cut -c1-330
timeout 300 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round6 --shapes 1,32,8,128,32768 \
  --patterns keep0.7,hash16 --configs @benchmarks/sweeps/d128_round6.json > $R/sweep_d128_round6.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"; tail -16 $R/sweep_d128_round6.log | cut -c1-330
