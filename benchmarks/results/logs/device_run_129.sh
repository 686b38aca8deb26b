#!/bin/bash
# The planner check over the model-shape grid (B=1, H=32, Hkv=8, D=128, 8k-64k, 8 patterns) with run 128's
# calibration and the Gluon dQ kernel at D=128 (runs 123-127): every backend forced against the choice
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 560 python3 -m tilesparse.bench.planner_check --grid models --reps 10 --out $R/planner_check_models_run129_h200.json \
  > $R/planner_models_run129.log 2>&1; echo "planner models rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "rows within" $R/planner_models_run129.log; grep -v " ok" $R/planner_models_run129.log | tail -12 | cut -c1-180
