#!/bin/bash
# #12: run 201's split for PerHead and TopKFeatures(8), whose forward+backward spends 300 us more host time than
# Hash(16)'s with the launches stubbed out: their explain() and cProfile of their forward+backward (own time, cumulative)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 280 python3 benchmarks/results/logs/host_split.py $R/host_split_run202.json --shapes 1x16x16x64x4096 \
  --patterns hash16,perhead,topk8 --modes fwd_bwd --explain --profile hash16/fwd_bwd perhead/fwd_bwd topk8/fwd_bwd \
  > $R/host_split_run202.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))s"
grep "^B1\|^kernels\|fused\|group" $R/host_split_run202.log | cut -c1-300
