#!/bin/bash
# #12 at the 4k shapes: are the tile configurations (chosen at 16k-32k) right where every program of a kernel
# fits in one wave and the longest causal block sets its time? Kernels alone per configuration (round 14),
# the baseline first and last (A/.../A), cuDNN and flash in the same process
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 540 python3 benchmarks/sweep_kernels.py --out $R --tag round14_4k \
  --shapes "1,16,16,64,4096;1,32,8,128,4096" --patterns keep0.7,keep0.5,hash16,hash64,hybrid \
  --configs @benchmarks/sweeps/round14_4k.json > $R/sweep_round14_4k.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -80 $R/sweep_round14_4k.log | cut -c1-200
