#!/bin/bash
# The Gluon GPU tests after review 0e83017 moved their skip into one fixture (tests/gpu/conftest.py):
# they must run, not skip, on Hopper with Triton 3.6. Then the cost model's calibration from new runs
# (the D=64 target grid, whose dK/dV kernel is the Gluon one since run 113, and the planner check
# over it; the index benchmark as committed), as in run 88
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 170 python3 -m pytest -v -rfEs -m gpu -n 8 -p no:cacheprovider --timeout 160 \
  tests/gpu/test_gluon_dq_gpu.py tests/gpu/test_gluon_dkdv_gpu.py > $R/tests_gluon_run128.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -1 $R/tests_gluon_run128.log | cut -c1-200
grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gluon_run128.log | head -5 | cut -c1-300
timeout 130 python3 benchmarks/bench_attention.py --grid targets --flex none --ideal-max-t 0 --rep-ms 30 --budget-s 70 \
  --out $R/bench_targets_run128_h200.json > $R/bench_targets_run128.log 2>&1; echo "targets rc=$? t=$(( $(date +%s) - T0 ))"
timeout 130 python3 -m tilesparse.bench.planner_check --grid targets --out $R/planner_check_run128_h200.json \
  > $R/planner_targets_run128.log 2>&1; echo "planner targets rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "rows within|SLOWER" $R/planner_targets_run128.log | cut -c1-180
python3 -m tilesparse.planner.calibrate $R/bench_targets_run128_h200.json $R/planner_check_run128_h200.json \
  benchmarks/results/bench_index_h200.json --out $R/costs.json > $R/calibrate_run128.log 2>&1; echo "calibrate rc=$?"
tail -4 $R/calibrate_run128.log | cut -c1-200
