#!/bin/bash
# After run 209c (same machine): PerHead at B=1 H=16 D=64 T=4,096 paired with cuDNN call by call (one process, 150
# pairs); the lean launches' device getter and site keys on and off (ab_launch_micro.py, Hash(16) at D=128 GQA)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc209d; GPU=h100
timeout 80 python3 benchmarks/results/logs/paired_cudnn.py --shapes 1x16x16x64x4096 --patterns perhead --modes fwd,fwd_bwd \
  --pairs 150 --lock /tmp/pc209d --expect 1 --out $R/paired_cudnn_perhead_run209d_$GPU.json > $R/paired_cudnn_perhead_run209d.txt 2>&1
echo "paired rc=$? t=$(( $(date +%s) - T0 ))"; grep " host \| sync " $R/paired_cudnn_perhead_run209d.txt | cut -c1-200
timeout 85 python3 benchmarks/results/logs/ab_launch_micro.py --ab launch-micro --shapes 1x32x8x128x4096 --patterns hash16 \
  --modes fwd_bwd --pairs 150 --out $R/ab_calls_launch_micro_hash16_run209d_$GPU.json > $R/ab_calls_launch_micro_hash16_run209d.txt 2>&1
echo "micro rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/ab_calls_launch_micro_hash16_run209d.txt | cut -c1-200
