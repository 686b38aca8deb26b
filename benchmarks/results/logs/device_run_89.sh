#!/bin/bash
# With run 88's calibration committed: the planner check over the D=64 target grid again (run 88's
# ran on the old costs and found one row slower than 10%: Hybrid forward at 32k, 1.10 ms with
# CuPy's index build against 0.85 with Triton's), then the model-shape grid (README tables) with
# the three-loop rule for long bucket segments
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 110 python3 -m tilesparse.bench.planner_check --grid targets --out $R/planner_check_run89_h200.json \
  > $R/planner_targets_run89.log 2>&1; echo "planner targets rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "rows within|SLOWER|hybrid" $R/planner_targets_run89.log | cut -c1-180
left=$(( 580 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/bench_models.py --out $R --tag models_run89_h200 > $R/bench_models_run89.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))"; tail -42 $R/bench_models_run89.log
