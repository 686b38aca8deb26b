#!/bin/bash
# The counting sort as committed (a one-hot tile up to 4 padded categories, sorted 256-row
# chunks above): the Triton GPU tests; the index build's kernels for Hash 16/64, QKDrop(0.7) and
# the hybrid, and QKDrop(0.7) sorted too (--one-hot-cats 0); the index benchmark again and the
# cost model's calibration from it; then the planner check over the model-shape grid with that
# calibration
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 280 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py > $R/tests_triton_gpu_run55.log 2>&1; echo "triton gpu tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -2 $R/tests_triton_gpu_run55.log
show() { python3 -c "
import json, sys
for l in sys.stdin:
    if l.startswith('{'):
        r = json.loads(l); print(r['T'], r['pattern'], r['backend'], r['one_hot_cats'], r['builders'], r['total_ms'], {k[:16]: v for k, v in r['kernels_ms'].items()})"; }
timeout 100 python3 benchmarks/results/logs/index_kernels.py $R/index_kernels_final_h200.jsonl --specs hash16,hash64,keep0.7,hybrid 2>&1 | show
timeout 60 python3 benchmarks/results/logs/index_kernels.py $R/index_kernels_keep_sorted_h200.jsonl --specs keep0.7 --one-hot-cats 0 2>&1 | show
timeout 100 python3 benchmarks/bench_features.py --out $R/index --index-only > $R/index.log 2>&1; echo "index bench rc=$?"
python3 -m tilesparse.planner.calibrate benchmarks/results/bench_targets_h200.json benchmarks/results/planner_check_h200.json $R/index/bench_features.json --out $R/costs.json > $R/calibrate.log 2>&1; echo "calibrate rc=$?"
cp $R/costs.json tilesparse/planner/costs.json
timeout 200 python3 -m tilesparse.bench.planner_check --grid models --reps 10 --out $R/planner_check_models_h200.json > $R/planner_models.log 2>&1; echo "planner check rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "rows within|hash|keep0.7 D=128 T= 65536" $R/planner_models.log | cut -c1-160 | tail -20
