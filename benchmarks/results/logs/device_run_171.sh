#!/bin/bash
# #12: the GPU tests of the code the index build's one-launch sort (index._sort_scatter) and the groups copied per
# lent entry (ir.prepare.copy_group) touch: the index build bit for bit against torch's prepare (T = 1,000 to 50,000),
# lean launch bitwise the normal path, CUDA graph capture and replay, non-finite containment, id validation, padding,
# Triton against the reference
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 420 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_nan_containment_gpu.py tests/gpu/test_reliability_gpu.py tests/gpu/test_padding_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference" "tests/gpu/test_triton_gpu.py::test_index_building_matches_torch_prepare" \
  tests/gpu/test_topk_gpu.py -k "not float32" > $R/tests_run171.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run171.log | tail -15 | cut -c1-300
