#!/bin/bash
# #12: the GPU suite with the longest programs first the default (TileConfig.heavy_first: 1 at D <= 64, 2 at D=128;
# run 194): the new test of both orders first (tests/gpu/test_heavy_first_gpu.py), then every file in tests/gpu but
# the two-GPU one and the poison file run 193 passed, 10 workers (14 ran out of an H100's memory in run 192).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 100 python3 -m pytest -v -rfE -m gpu -n 8 -p no:cacheprovider tests/gpu/test_heavy_first_gpu.py > $R/tests_heavy_first_run195.log 2>&1
echo "heavy-first tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "FAILED|passed|failed" $R/tests_heavy_first_run195.log | grep -v "^\[gw" | tail -8 | cut -c1-250
timeout 420 python3 -m pytest -v -rfE -m gpu -n 10 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  --ignore=tests/gpu/test_bound_checks_gpu.py --ignore=tests/gpu/test_heavy_first_gpu.py > $R/tests_gpu_run195.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed" $R/tests_gpu_run195.log | grep -v "^\[gw" | tail -3 | cut -c1-300
grep -E "^FAILED|^ERROR" $R/tests_gpu_run195.log | cut -c1-250 | sort | uniq | head -20
