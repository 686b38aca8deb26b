#!/bin/bash
# After run 209d (same machine): every built-in pattern paired with cuDNN call by call at both 4k shapes, one process a
# shape (not run 208b's 16 processes in turns), 100 pairs, forward and forward+backward, decisions given
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc209e; GPU=h100
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  timeout 100 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 \
    --modes fwd,fwd_bwd --pairs 100 --lock /tmp/pc209e --expect 1 --out $R/paired_cudnn_${s}_run209e_$GPU.json \
    > $R/paired_cudnn_${s}_run209e.txt 2>&1
  echo "paired $s rc=$? t=$(( $(date +%s) - T0 ))"
done
grep -h " host " $R/paired_cudnn_*_run209e.txt | cut -c1-160
