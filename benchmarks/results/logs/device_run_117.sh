#!/bin/bash
# The GPU tests runs 113-115 did not run on the warp-specialized dK/dV default: the CuPy, planner, SDPA,
# reliability, decoding and sequence-parallel files (the last needs two GPUs and skips on one), and the four
# property shards of test_triton_gpu.py that runs 114-115 did not reach in time (fp32 and D=40), one line a test
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 480 python3 -m pytest -v -rfE -m gpu -n 10 -p no:cacheprovider --timeout 400 \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference[float16-D40]" \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference[float32-D40]" \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference[float32-D64]" \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference[float32-D128]" \
  tests/gpu/test_cupy_gpu.py tests/gpu/test_planner_gpu.py tests/gpu/test_sdpa_gpu.py tests/gpu/test_reliability_gpu.py \
  tests/gpu/test_decode_gpu.py tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_rest_run117.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
echo "passed $(grep -cE ' PASSED ' $R/tests_rest_run117.log) skipped $(grep -cE ' SKIPPED ' $R/tests_rest_run117.log)"
grep -E " (FAILED|ERROR) " $R/tests_rest_run117.log | head -20 | cut -c1-300
tail -5 $R/tests_rest_run117.log
