#!/bin/bash
# dP first in the dK/dV kernel of drop groups at D=128 (TileConfig.dp_first=1, from run 80's
# round 8): an A/B/A/B sweep of the kernels against dp_first=0 in one process (run 80's forward,
# unchanged between its configs, moved by up to 5%), the D=128 target rows as whole calls, then
# the whole GPU suite on this code (two calls: "bench", then "suite")
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
if [ "$1" = bench ]; then
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round8_ab \
  --shapes "1,32,8,128,32768;2,12,12,128,16384" --patterns keep0.7,keep0.5 \
  --configs @benchmarks/sweeps/d128_round8_ab.json > $R/sweep_d128_round8_ab.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))"; tail -17 $R/sweep_d128_round8_ab.log | cut -c1-200
timeout 300 python3 benchmarks/bench_models.py --out $R --tag targets_run81_h200 \
  --shapes "2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5,hash16 \
  > $R/bench_targets_run81.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -10 $R/bench_targets_run81.log
exit 0
fi
timeout 500 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_all_run81.log 2>&1; echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_gpu_all_run81.log
# the "bench" call's QKDrop(0.7) row at 32k timed its back-to-back calls slower than its synchronized
# ones (46.5 against 43.1 ms): that row again, in a fresh process
timeout 60 python3 benchmarks/bench_models.py --out $R --tag targets_run81b_h200 --shapes "1,32,8,128,32768" \
  --patterns keep0.7 > $R/bench_targets_run81b.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
tail -4 $R/bench_targets_run81b.log
