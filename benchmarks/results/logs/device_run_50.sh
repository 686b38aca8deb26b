#!/bin/bash
# the GPU suite after this session's changes (the lean launch listed for Triton 3.6-3.9; the
# GPU machine's Triton is 3.6, whose path is unchanged); one GPU, so sequence parallelism is left out
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 570 python3 -m pytest -v -rfE --tb=short -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_h200_run50.log 2>&1; echo "gpu tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_gpu_h200_run50.log | cut -c1-300 | tail -25
