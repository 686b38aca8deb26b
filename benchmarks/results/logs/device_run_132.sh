#!/bin/bash
# The GPU tests of the paths that run the new default forward kernel at D=128 (gluon_fwd.py) that run 131 did
# not reach: CUDA-graph capture and replay, the lean launch, non-finite containment, padding; then the Gluon
# dQ and dK/dV kernels' tests on the new default
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 480 python3 -m pytest -v -rfE -m gpu -n 10 -p no:cacheprovider --timeout 460 tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_graph_capture_gpu.py tests/gpu/test_lean_launch_gpu.py tests/gpu/test_nan_containment_gpu.py \
  tests/gpu/test_padding_gpu.py tests/gpu/test_gluon_dq_gpu.py tests/gpu/test_gluon_dkdv_gpu.py \
  > $R/tests_run132.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -cE " PASSED " $R/tests_run132.log; grep -E "(FAILED|ERROR|Timeout)" $R/tests_run132.log | head -12 | cut -c1-300
tail -2 $R/tests_run132.log | cut -c1-200
