#!/bin/bash
# #12: run 204's one failure fixed (a PerHead's dense-head flags were uploaded with .to(device) when first bound, which
# a CUDA graph capture refuses; now ir.prepare.head_flags, a kept device constant made from fills during a capture):
# PerHead's CUDA graph and torch.compile tests and the dense-heads tests again (little device time was left)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 170 python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py \
  tests/gpu/test_dense_heads_gpu.py -k "perhead or dense_heads" > $R/tests_run205.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run205.log | tail -12 | cut -c1-300
