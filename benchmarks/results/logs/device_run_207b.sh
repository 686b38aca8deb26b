#!/bin/bash
# Run 207b, on run 207's machine while it was warm: the GPU tests of the lean launches and sites, CUDA graphs and
# the non-finite flags again, whole (run 207's first subset reached its time limit at 94%, none failed)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R; timeout 230 python3 -m pytest -q -rfEs -m gpu -n 12 -p no:cacheprovider tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py tests/gpu/test_nan_containment_gpu.py > $R/tests_gpu_sites_run207b.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_sites_run207b.log | tail -12 | cut -c1-300
