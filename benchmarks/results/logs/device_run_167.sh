#!/bin/bash
# #12: after the non-finite flags moved into the lent index buffer (zeroed by the block pass): the GPU tests of lean launch bitwise the normal path (several
# calls per pattern, so buffers are lent again), CUDA graph capture and replay (torch.cuda.graph, cuda_graphs=True,
# torch.compile reduce-overhead), non-finite containment, id validation, padding, Triton against the reference
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 400 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_nan_containment_gpu.py tests/gpu/test_reliability_gpu.py tests/gpu/test_padding_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference" -k "not float32" > $R/tests_run167.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run167.log | tail -15 | cut -c1-300
