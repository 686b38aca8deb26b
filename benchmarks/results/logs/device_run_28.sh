#!/bin/bash
# the default-mode torch.compile GPU test of the kept forward graph (every built-in pattern)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py -k "default_compile" > $OUT/tests_compile_default.log 2>&1; echo "rc=$?"
grep -E "PASSED|FAILED|passed|failed|Error" $OUT/tests_compile_default.log | cut -c1-250 | tail -12
