#!/bin/bash
# The per-launch workspace (commit adb3ac8) and dK/dV's key blocks split over windows of their query tiles
# (TileConfig.dkdv_split, built off by default: no GPU had run it): (1) the GPU tests of CUDA graphs, graph capture, dense heads and the splits; (2) the kernels alone per arm
# (ab_split.py: off, the forward and dQ in 4, and dK/dV in 2 or 4 beside them, and alone), PerHead and Hash(16) at
# D=64, PerHead at D=128 GQA; (3) the splits on and off call by call (PerHead, ab_calls.py --ab split); (4) PerHead
# paired with cuDNN call by call
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc210
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
timeout 210 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider tests/gpu/test_split_forward_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_dense_heads_gpu.py \
  > $R/tests_graphs_split_run210.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -c PASSED $R/tests_graphs_split_run210.log
grep -E "FAILED|ERROR|passed|failed" $R/tests_graphs_split_run210.log | tail -8 | cut -c1-220
timeout 120 python3 benchmarks/results/logs/ab_split.py $R/ab_split_run210_$GPU.json 1x16x16x64x4096 perhead,hash16 \
  4,4k2,4k4,k4 > $R/ab_split_run210.log 2>&1
echo "ab_split rc=$? t=$(( $(date +%s) - T0 ))s"; tail -3 $R/ab_split_run210.log | cut -c1-200
timeout 60 python3 benchmarks/results/logs/ab_split.py $R/ab_split_d128_run210_$GPU.json 1x32x8x128x4096 perhead \
  k2,k4 > $R/ab_split_d128_run210.log 2>&1
echo "ab_split d128 rc=$? t=$(( $(date +%s) - T0 ))s"; tail -2 $R/ab_split_d128_run210.log | cut -c1-200
