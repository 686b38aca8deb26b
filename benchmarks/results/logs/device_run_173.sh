#!/bin/bash
# #12: the final tree (the one-launch sort kept to sides of at most 4,096 rows; the switches' context managers folded
# into backends/switch.py): the index build bit for bit against torch's prepare, lean launches, CUDA graph capture,
# non-finite containment, padding
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 400 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider \
  "tests/gpu/test_triton_gpu.py::test_index_building_matches_torch_prepare" tests/gpu/test_lean_launch_gpu.py \
  tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py tests/gpu/test_padding_gpu.py \
  > $R/tests_run173.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run173.log | tail -15 | cut -c1-300
