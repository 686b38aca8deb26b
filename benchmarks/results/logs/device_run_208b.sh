#!/bin/bash
# #12 on the tree of run 208 (launch sites, the Gluon kernels' launches through sites): every built-in pattern
# paired with cuDNN SDPA call by call (logs/paired_cudnn.py, as runs 196 and 204: 150 pairs, host and synchronized,
# 16 processes in turns) at both 4k shapes (after run 208 on the same machine); then the GPU tests run 208 did
# not take, in the time left
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc208b; export R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
FIRST="test_decode_gpu.py test_lean_launch_gpu.py test_nan_containment_gpu.py test_graphs_gpu.py test_graph_capture_gpu.py
  test_gluon_fwd_gpu.py test_gluon_dq_gpu.py test_gluon_dkdv_gpu.py"
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 200 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns $p --pairs 150 \
      --lock /tmp/pc208b --expect 16 --out /tmp/pc208b/$s-$p.json > /tmp/pc208b/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/pc208b/*.log | head
cat /tmp/pc208b/1x16*.log /tmp/pc208b/1x32*.log | grep " host " > $R/paired_cudnn_run208b.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/pc208b/*.json'))},
          open('$R/paired_cudnn_run208b_$GPU.json', 'w'), indent=1)"
echo "paired t=$(( $(date +%s) - T0 ))s"; cut -c1-200 $R/paired_cudnn_run208b.txt
LEFT=$(( 585 - ($(date +%s) - T0) ))
[ $LEFT -gt 60 ] || { echo "no time left for the tests"; exit 0; }
timeout $LEFT python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  $(for f in $FIRST; do echo --ignore=tests/gpu/$f; done) > $R/tests_gpu_rest_run208b.log 2>&1
echo "rest rc=$? t=$(( $(date +%s) - T0 ))s (limit ${LEFT}s)"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_rest_run208b.log | tail -12 | cut -c1-300
