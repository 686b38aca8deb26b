#!/bin/bash
# #12: TopKFeatures' q~ and k~ in one launch a side (features.py): the GPU tests that run it
# (every TopKFeatures test, the Triton-vs-reference test, NaN containment with the new unkept-
# feature test), then its A/B against the torch ops it replaced (ab_topk_features.py).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider \
  -k "topk or TopK or feature or Feature or test_triton_matches_reference" tests/gpu > $R/tests_topk_run147.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_topk_run147.log | tail -12 | cut -c1-300
left=$(( 580 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/results/logs/ab_topk_features.py $R/ab_topk_features_run147_h200.json > $R/ab_topk_features_run147.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -10 $R/ab_topk_features_run147.log | cut -c1-300
