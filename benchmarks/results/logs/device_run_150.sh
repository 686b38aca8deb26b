#!/bin/bash
# #12: the final tree (keep_features checks the head list itself): every GPU test that runs
# TopKFeatures on the Triton backend or checks NaN containment, and the lean-launch tests.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 330 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider -k "topk or TopK or feature or Feature" \
  tests/gpu/test_nan_containment_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_padding_gpu.py tests/gpu/test_decode_gpu.py > $R/tests_final_run150.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_final_run150.log | tail -8 | cut -c1-300
