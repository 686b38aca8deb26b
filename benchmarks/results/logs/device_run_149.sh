#!/bin/bash
# #12: the two GPU tests run 148's time limit cut (the Triton-vs-reference test in fp32, D=16 and
# 128: cold fp32 compiles), then decisions made in the call against given at T=16k, D=64 and 128
# (run 140's grid, after the copies and casts cut since; B=2 H=12).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 -m pytest -v -rfEs -m gpu -n 4 -p no:cacheprovider \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference[float32-D128]" \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference[float32-D16]" > $R/tests_fp32_run149.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_fp32_run149.log | tail -4 | cut -c1-300
left=$(( 470 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/bench_attention.py --grid full --d 64,128 --t 16384 \
  --patterns hash16,hybrid,hash64,hash8,topk8,keep0.7 --decide both --flex none --no-long --budget-s $(( left - 40 )) \
  --out $R/bench_decide_run149_h200.json > $R/bench_decide_run149.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))"; grep -v -i warn $R/bench_decide_run149.log | tail -30 | cut -c1-160
