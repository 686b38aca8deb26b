#!/bin/bash
# #12: the rest of the GPU tests whose calls run the Triton index build on the final tree (index buffers lent per
# call, the non-finite flags zeroed in the build): SDPA-style calls with padding and document ids, TopKFeatures,
# decoding against a KV cache, the planner
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_sdpa_gpu.py tests/gpu/test_topk_gpu.py tests/gpu/test_decode_gpu.py tests/gpu/test_planner_gpu.py \
  > $R/tests_run169.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run169.log | tail -15 | cut -c1-300
