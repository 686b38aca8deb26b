#!/bin/bash
# #12: (1) the backward's two sanitizing variants in one launch (merged_sanitize), now launched from a launch.Site
# with the kept group's index tensors as one launch.Fixed, timed call by call against the launch pairs (ab_calls.py
# --ab merged-sanitize); (2) launch sites against keyed launches at D=128 GQA, where the warp-specialized Gluon
# kernels' launches now go through sites too (ab_calls.py --ab sites: Dense on Triton and QKDrop(0.5) take all three
# Gluon kernels there); (3) the GPU tests of what run 207 did not run (the decode site, 7dc9bb3; the review after it,
# 2556026) and of this change: decode, lean launches and sites, non-finite flags, CUDA graphs, the Gluon kernels
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
for ab in merged-sanitize:1x16x16x64x4096,1x32x8x128x4096:hash16,keep0.7 sites:1x32x8x128x4096:dense-triton,keep0.5; do
  IFS=: read name shapes pats <<< "$ab"; out=$R/ab_calls_${name//-/_}_${pats//[,.]/_}_run208_$GPU
  timeout 120 python3 benchmarks/results/logs/ab_calls.py --ab $name --shapes $shapes \
    --patterns $pats --modes fwd,fwd_bwd --pairs 200 --out $out.json > $out.txt 2>&1
  echo "ab $name $pats rc=$? t=$(( $(date +%s) - T0 ))s"; tail -18 $out.txt | cut -c1-220
done
FIRST="test_decode_gpu.py test_lean_launch_gpu.py test_nan_containment_gpu.py test_graphs_gpu.py test_graph_capture_gpu.py
  test_gluon_fwd_gpu.py test_gluon_dq_gpu.py test_gluon_dkdv_gpu.py"
LEFT=$(( 580 - ($(date +%s) - T0) ))
timeout $LEFT python3 -m pytest -q -rfEs -m gpu -n 12 -p no:cacheprovider $(for f in $FIRST; do echo tests/gpu/$f; done) \
  > $R/tests_gpu_first_run208.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s (limit ${LEFT}s)"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_first_run208.log | tail -12 | cut -c1-300
