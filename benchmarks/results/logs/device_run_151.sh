#!/bin/bash
# #12: the final tree: the Triton-vs-reference GPU test in 16-bit (every pattern, TopKFeatures
# included), then a second A/B round of features.py against the torch ops on this host.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider -k "test_triton_matches_reference and not float32" \
  tests/gpu/test_triton_gpu.py > $R/tests_final_run151.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_final_run151.log | tail -4 | cut -c1-300
timeout 120 python3 benchmarks/results/logs/ab_topk_features.py $R/ab_topk_features_run151_h200.json > $R/ab_topk_features_run151.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -9 $R/ab_topk_features_run151.log | cut -c1-300
