#!/bin/bash
# run 81 again after the back-to-back timing's fix (bench_models.gpu_ms timed a call of 40 ms or
# more once: do_bench's rep was a fixed 60 ms; now at least 10 calls): the A/B/A/B sweep of
# dp_first at D=128, then every target row as whole calls
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round8_ab10 \
  --shapes "1,32,8,128,32768;2,12,12,128,16384" --patterns keep0.7,keep0.5 \
  --configs @benchmarks/sweeps/d128_round8_ab.json > $R/sweep_d128_round8_ab10.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))"; tail -17 $R/sweep_d128_round8_ab10.log | cut -c1-200
timeout 300 python3 benchmarks/bench_models.py --out $R --tag targets_run82_h200 \
  --shapes "2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 \
  > $R/bench_targets_run82.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -22 $R/bench_targets_run82.log
