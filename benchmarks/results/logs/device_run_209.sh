#!/bin/bash
# #12: the Triton forward's and dQ's query blocks split over windows of their key tiles on short calls
# (TileConfig.fwd_split, dq_split; kernels._share_window, _merged_shares, _summed_shares; on by default at D <= 64 in
# 16-bit for calls of at most 1,024 query blocks): (1) its GPU tests and those of what the change touches (lean
# launches and their device getter, the Gluon forward's and dQ's sites without the workspace, non-finite flags,
# programs longest first, CUDA graphs); (2) kernels alone, unsplit against the forward split in 4 and both split in
# 2, 4 and 8 windows a block, at both 4k shapes (logs/ab_split.py)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
FIRST="test_split_forward_gpu.py test_lean_launch_gpu.py test_gluon_fwd_gpu.py test_gluon_dq_gpu.py
  test_nan_containment_gpu.py test_heavy_first_gpu.py test_graphs_gpu.py"
timeout 300 python3 -m pytest -q -rfEs -m gpu -n 12 -p no:cacheprovider $(for f in $FIRST; do echo tests/gpu/$f; done) \
  > $R/tests_gpu_run209.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run209.log | tail -14 | cut -c1-300
LEFT=$(( 585 - ($(date +%s) - T0) ))
timeout $LEFT python3 benchmarks/results/logs/ab_split.py $R/ab_split_run209_$GPU.json 1x16x16x64x4096,1x32x8x128x4096 \
  dense-triton,perhead,hash16,hash64,keep0.7 f4,2,4,8 > $R/ab_split_run209.log 2>&1
echo "ab_split rc=$? t=$(( $(date +%s) - T0 ))s"; tail -11 $R/ab_split_run209.log | cut -c1-200
