#!/bin/bash
# 32-wide forward tiles in groups with a bucket predicate at D=128 (TileConfig.bucket_fwd_n, from
# run 59's sweep): the target rows with a bucket predicate (QKDrop(0.7) as the unchanged control),
# then the whole GPU suite on this code (two calls: "bench", then "suite")
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
if [ "$1" = bench ]; then
timeout 300 python3 benchmarks/bench_models.py --out $R --tag targets_run60_h200 \
  --shapes "2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,hash16,hash64,hybrid \
  > $R/bench_targets_run60.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -14 $R/bench_targets_run60.log
exit 0
fi
timeout 560 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_all_run60.log 2>&1; echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_gpu_all_run60.log
