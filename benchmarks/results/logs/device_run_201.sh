#!/bin/bash
# #12: where an eager call's host time goes on the GPU's host (host_split.py): host from an idle GPU, the part inside
# the Triton launches, the launches a call, and the host time with the launches stubbed out; cProfile of three rows
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 280 python3 benchmarks/results/logs/host_split.py $R/host_split_d64_run201.json --shapes 1x16x16x64x4096 \
  --patterns dense-triton,keep0.5,hash16,perhead,topk8 --profile dense-triton/fwd hash16/fwd_bwd perhead/fwd \
  > $R/host_split_d64_run201.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))s"
timeout 200 python3 benchmarks/results/logs/host_split.py $R/host_split_d128_run201.json --shapes 1x32x8x128x4096 \
  --patterns dense-triton,hash16 > $R/host_split_d128_run201.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))s"
grep -v "^ \|^$\|ncalls\|Ordered\|List reduced\|function calls" $R/host_split_d*_run201.log | cut -c1-200
