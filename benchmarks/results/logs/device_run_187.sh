#!/bin/bash
# #12: TopKFeatures' q~ and k~ kernel with each row's ids in one load (ab_keep_features.py: needs
# build/features_c8ec1d3.py carried), then the GPU tests of the feature kernels and the SDPA backend
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/results/logs/ab_keep_features.py $R/ab_keep_features_run187_h200.json > $R/ab_keep_features_run187.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))"; tail -17 $R/ab_keep_features_run187.log | cut -c1-200
timeout 250 python3 -m pytest -q -rfEs -m gpu -n 8 -p no:cacheprovider tests/gpu/test_topk_gpu.py tests/gpu/test_bound_features_gpu.py \
  tests/gpu/test_sdpa_gpu.py tests/gpu/test_nan_containment_gpu.py > $R/tests_features_run187.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_features_run187.log | tail -8 | cut -c1-300
