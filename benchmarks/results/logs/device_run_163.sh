#!/bin/bash
# #12: after trusted decisions' structural checks ran once per call sizes (Decisions.fits) and their stamp
# read only the trusted objects: the GPU tests that pass decisions (validation, id edits after decide,
# CUDA graph captures replayed with new decisions, Triton against the reference)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_reliability_gpu.py tests/gpu/test_graph_capture_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference" -k "not float32" > $R/tests_run163.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run163.log | tail -12 | cut -c1-300
