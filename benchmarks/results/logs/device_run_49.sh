#!/bin/bash
# #11: the fused backward's dQ adds again, now in the order a fused causal backward visits its
# tiles (probe_atomics.py --schedule causal: a key block's program adds into the query blocks
# from its own to its head's last, programs of one head side by side), element atomics into
# gathered rows and one tensor-memory reduction per tile (tma_add), at QKDrop(0.7)'s tile
# counts: D=128 (B=1, H=32, T=32,768: --t 23168, 2.1M 64x64 tiles; 128x128 tiles at
# --block-m 128) and D=64 (B=2, H=12, T=16,384: 24 heads, --t 11456, 388k tiles); the random
# schedule of runs 13 and 47 once more for comparison; the dQ kernel they would remove, timed at
# the D=128 shape in the same run. Then the lean launch's GPU test (launch.py now lists 3.6-3.9).
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
for cfg in "causal 32 23168 128 64" "causal 32 23168 128 128" "random 32 32768 128 64" "causal 24 11456 64 64" \
           "causal 24 11456 64 128"; do
  set -- $cfg
  echo "== schedule $1 heads $2 t $3 d $4 block_m $5"
  timeout 120 python3 benchmarks/probe_atomics.py --schedule $1 --heads $2 --t $3 --d $4 --block-m $5 \
    --out $R/atomics_$1_d$4_m$5 2>&1 | tail -6
done
timeout 150 python3 benchmarks/results/logs/kernel_times.py 1,32,8,128,32768 $OUT/r/dq_kernel_d128.json
timeout 200 python3 -m pytest -q -m gpu -n 4 tests/gpu/test_lean_launch_gpu.py -p no:cacheprovider 2>&1 | tail -3
echo "t=$(( $(date +%s) - T0 ))"
