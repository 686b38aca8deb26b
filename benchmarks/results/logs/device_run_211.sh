#!/bin/bash
# dK/dV's key blocks split in 4 by default where dense heads are fused (D <= 64, 16-bit, after run 210): (1) the GPU
# tests of the splits, dense heads and graph capture on the default configuration; (2) every built-in pattern paired
# with cuDNN call by call at both 4k shapes (as run 209e); (3) where a call's host time goes (cProfile, Hash(16),
# PerHead, TopKFeatures(8) at D=64)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc211
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
timeout 170 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider tests/gpu/test_split_forward_gpu.py \
  tests/gpu/test_dense_heads_gpu.py tests/gpu/test_graph_capture_gpu.py > $R/tests_split_default_run211.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "FAILED|ERROR|passed|failed" $R/tests_split_default_run211.log | tail -6 | cut -c1-220
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  timeout 100 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 \
    --modes fwd,fwd_bwd --pairs 100 --lock /tmp/pc211 --expect 1 --out $R/paired_cudnn_${s}_run211_$GPU.json \
    > $R/paired_cudnn_${s}_run211.txt 2>&1
  echo "paired $s rc=$? t=$(( $(date +%s) - T0 ))"
done
grep -h " host " $R/paired_cudnn_*_run211.txt | cut -c1-160
timeout 90 python3 benchmarks/results/logs/profile_host.py $R/profile_host_run211 200 hash16,perhead,topk8 1x16x16x64x4096 \
  > $R/profile_host_run211.log 2>&1
echo "profile rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/profile_host_run211.log
