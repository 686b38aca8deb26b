#!/bin/bash
# after the duplicate folds (sfa.cu, the Triton kernels' tile walk, the index builders' arguments)
# and the one-launch id check: the GPU suite (one GPU; sequence parallelism needs two)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 400 python3 -m pytest -v -rfE --tb=short -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_h200_run33.log 2>&1; echo "gpu tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_gpu_h200_run33.log | cut -c1-300 | tail -25
