#!/bin/bash
# After run 210 (same machine): (1) dK/dV's split on and off call by call (PerHead, ab_calls.py --ab split-dkdv, the
# process configured with dkdv_split=4); (2) PerHead (dK/dV split and not), Hash(16) and TopKFeatures(8) paired with
# cuDNN call by call; (3) the host time of the SDPA backend's priority switch, torch's sdpa_kernel against
# backends/sdpa.cudnn_first
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc210b
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
out=$R/ab_calls_split_dkdv_perhead_run210b_$GPU
timeout 80 python3 benchmarks/results/logs/ab_calls.py --ab split-dkdv --config '{"dkdv_split": 4}' \
  --shapes 1x16x16x64x4096 --patterns perhead --modes fwd_bwd --pairs 150 --out $out.json > $out.txt 2>&1
echo "ab split rc=$? t=$(( $(date +%s) - T0 ))s"; tail -4 $out.txt | cut -c1-200
timeout 100 python3 benchmarks/results/logs/paired_cudnn.py --shapes 1x16x16x64x4096 --patterns perhead,hash16,topk8 \
  --modes fwd,fwd_bwd --pairs 100 --lock /tmp/pc210b --expect 1 --out $R/paired_cudnn_run210b_$GPU.json \
  > $R/paired_cudnn_run210b.txt 2>&1
echo "paired rc=$? t=$(( $(date +%s) - T0 ))s"; grep " host " $R/paired_cudnn_run210b.txt | cut -c1-160
timeout 60 python3 benchmarks/results/logs/paired_cudnn.py --shapes 1x16x16x64x4096 --patterns perhead \
  --modes fwd_bwd --pairs 100 --config '{"dkdv_split": 4}' --out $R/paired_cudnn_dkdv_run210b_$GPU.json \
  > $R/paired_cudnn_dkdv_run210b.txt 2>&1
echo "paired dkdv rc=$? t=$(( $(date +%s) - T0 ))s"; grep " host " $R/paired_cudnn_dkdv_run210b.txt | cut -c1-160
timeout 60 python3 benchmarks/results/logs/sdpa_priority_host.py $R/sdpa_priority_host_run210b_$GPU.json
