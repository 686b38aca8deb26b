#!/bin/bash
# the planner GPU tests (whole calls with each index builder forced, against the reference) after
# Triton's counting sort began to rank by sorting (runs 54-56)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 170 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu/test_planner_gpu.py > $R/tests_planner_gpu_run57.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))"
tail -3 $R/tests_planner_gpu_run57.log
