#!/bin/bash
# After run 209 (another machine; its GPU tests ran out of time before pytest printed which failed): the split now
# only in groups that fuse dense heads with sparse ones (PerHead's), by default at D <= 64 on calls of at most 1,024
# query blocks. (1) The GPU tests of the split and of what it touches, one line a test; (2) the split on and off call
# by call (ab_calls.py --ab split, PerHead); (3) where an eager call's host time goes (host_split.py), in the time left
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
FIRST="test_split_forward_gpu.py test_nan_containment_gpu.py test_heavy_first_gpu.py test_lean_launch_gpu.py
  test_gluon_dq_gpu.py"
timeout 230 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider $(for f in $FIRST; do echo tests/gpu/$f; done) \
  > $R/tests_gpu_run209b.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -c PASSED $R/tests_gpu_run209b.log; grep -E "FAILED|ERROR" $R/tests_gpu_run209b.log | cut -c1-250 | head -20
out=$R/ab_calls_split_perhead_run209b_$GPU
timeout 100 python3 benchmarks/results/logs/ab_calls.py --ab split --shapes 1x16x16x64x4096 --patterns perhead \
  --modes fwd,fwd_bwd --pairs 150 --out $out.json > $out.txt 2>&1
echo "ab split rc=$? t=$(( $(date +%s) - T0 ))s"; tail -4 $out.txt | cut -c1-200
LEFT=$(( 385 - ($(date +%s) - T0) ))
[ $LEFT -gt 30 ] || exit 0
timeout $LEFT python3 benchmarks/results/logs/host_split.py $R/host_split_run209b_$GPU.json --shapes 1x16x16x64x4096,1x32x8x128x4096 \
  --patterns hash16,keep0.7,perhead > $R/host_split_run209b.log 2>&1
echo "host_split rc=$? t=$(( $(date +%s) - T0 ))s"; grep "^B1_\|bare" $R/host_split_run209b.log | cut -c1-200
