#!/bin/bash
# Triton's counting sort ranks a chunk's rows with a sort of its keys (tl.sort, tl.histogram,
# tl.gather) instead of a (rows x categories) one-hot tile: the GPU test of the index build
# against torch's, then the build's kernels as in run 53 (default chunks, then chunks of 256,
# 512 and 1024 rows at every bucket count)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 200 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/gpu/test_triton_gpu.py -k "index_building or hashing_in_the_triton_builder" 2>&1 | tail -3
# (the script's options as they are now; this run's code sorted at every bucket count, its first
# pass with the one-hot version's chunk sizes: 64 rows at 64 buckets, 256 at 16)
for sb in "" 256 512 1024; do
  timeout 120 python3 benchmarks/results/logs/index_kernels.py $R/index_kernels_sorted${sb:+_$sb}_h200.jsonl \
    ${sb:+--sort-rows $sb --one-hot-cats 0} 2>&1 | grep '^{' | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(r['T'], r['pattern'], r['backend'], r['sort_rows'], r['builders'], r['total_ms'], {k[:16]: v for k, v in r['kernels_ms'].items()})"
done
echo "t=$(( $(date +%s) - T0 ))"
