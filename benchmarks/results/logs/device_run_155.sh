#!/bin/bash
# CI-time session: LeanKernel's constructor now checks for the interpreter's stand-in (speed-ups
# under TRITON_INTERPRET=1): the GPU tests of the lean launch, capture and replay, and the
# Triton backend against the reference in 16-bit, on the compiled path
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 420 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference" -k "not float32" > $R/tests_run155.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run155.log | tail -6 | cut -c1-300
python3 -c "import sys, tilesparse.backends.triton.launch as L; print('interpreter module loaded by launch.py:', 'triton.runtime.interpreter' in sys.modules)"
