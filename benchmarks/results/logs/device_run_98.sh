#!/bin/bash
# With index_host (CuPy's build priced with its 0.12 ms of extra host time, run 97): the planner check
# over the D=64 target grid (run 89 missed one row: the hybrid's forward at 32k, CuPy's build +22%),
# then over the model-shape grid (the grid, where the 32k rows now build with Triton)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 130 python3 -m tilesparse.bench.planner_check --grid targets --out $R/planner_check_run98_h200.json \
  > $R/planner_targets_run98.log 2>&1; echo "planner targets rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "rows within|SLOWER|hybrid" $R/planner_targets_run98.log | cut -c1-180
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 -m tilesparse.bench.planner_check --grid models --reps 10 --out $R/planner_check_models_run98_h200.json \
  > $R/planner_models_run98.log 2>&1; echo "planner models rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "rows within" $R/planner_models_run98.log; grep -v " ok" $R/planner_models_run98.log | tail -12 | cut -c1-180
