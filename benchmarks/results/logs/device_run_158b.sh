#!/bin/bash
# #12: the GPU tests the bound steps touch: lean launches, CUDA graph captures, the non-finite
# flags' protocol (its stand-ins patch op.launch_pair and op.new_flags), Triton against the reference
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference" -k "not float32" > $R/tests_run158.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run158.log | tail -12 | cut -c1-300
