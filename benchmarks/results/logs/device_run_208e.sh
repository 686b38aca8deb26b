#!/bin/bash
# After run 208c (same machine): where an eager call's host time goes (logs/host_split.py; run 208d, the same command
# before host_split.py timed and stubbed launch.Site's launches, saw none of them and is not kept)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R; timeout 150 python3 benchmarks/results/logs/host_split.py $R/host_split_run208e.json --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns hash16,keep0.7,dense-triton --profile B1_H16_Hkv16_D64_T4096/keep0.7/fwd_bwd B1_H32_Hkv8_D128_T4096/keep0.7/fwd_bwd > $R/host_split_run208e.log 2>&1; echo rc=$? t=$(( $(date +%s) - T0 )); grep "^B1_\|bare" $R/host_split_run208e.log | cut -c1-200
