#!/bin/bash
# #12: the GPU suite on the final tree (the GQA sum's in-order path, the paired searches, TopKFeatures' q~ and k~ by
# Triton's feature kernel on the SDPA path): every file in tests/gpu but the two-GPU sequence-parallel test, 14 workers
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 520 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_run186.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run186.log | tail -15 | cut -c1-300
