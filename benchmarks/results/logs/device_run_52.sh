#!/bin/bash
# #11's "the planner's choice stays within 10% of the best forced option on every row of the new
# grid": the planner check over the model-shape grid (B=1, H=32, Hkv=8, D=128, T 8k-64k, the
# 8 patterns, forward and forward+backward), every backend that can run a row forced against
# the automatic choice, timed interleaved; rows are written as they finish
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 575 python3 -m tilesparse.bench.planner_check --grid models --reps 10 --out $R/planner_check_models_h200.json > $R/planner_models.log 2>&1; echo "planner check rc=$? t=$(( $(date +%s) - T0 ))"
tail -70 $R/planner_models.log | cut -c1-220
