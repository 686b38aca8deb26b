#!/bin/bash
# run 55's index benchmark and calibration again, its files alone (run 55 returned too many files
# for the benchmark's JSON to come back): bench_index_h200.json and tilesparse/planner/costs.json
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 60 python3 benchmarks/bench_features.py --out $R/index --index-only > $R/index.log 2>&1; echo "index rc=$?"
python3 -m tilesparse.planner.calibrate benchmarks/results/bench_targets_h200.json benchmarks/results/planner_check_h200.json $R/index/bench_features.json --out $R/costs.json > $R/calibrate.log 2>&1; echo "calibrate rc=$?"
rm -f $R/index/bench_features.png $R/index.log
