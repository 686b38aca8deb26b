#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 170 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py tests/gpu/test_lean_launch_gpu.py > $R/tests_graph_nan_lean_h200_run6.log 2>&1; echo "tests1 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 60 python3 benchmarks/bench_models.py --out $R --tag targets_flag2_h200 --shapes 2,12,12,64,16384 --patterns keep0.7,keep0.5,hash16 > $R/bench_d64.log 2>&1; echo "bench64 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 python3 benchmarks/bench_models.py --out $R --tag targets_d128_flag2_h200 --shapes 1,32,8,128,32768 --patterns keep0.7,keep0.5,hash16 > $R/bench_d128.log 2>&1; echo "bench128 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 100 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 --calls 30 --stat median > $R/probe.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
TILESPARSE_GPU_EXAMPLES=120 timeout 160 python3 -m pytest -v -rfE --tb=short -m gpu -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py -k test_triton_matches_reference > $R/tests_triton_matches_h200_run6.log 2>&1; echo "tests2 rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "PASSED|FAILED|ERROR|passed|failed" $R/tests_graph_nan_lean_h200_run6.log | grep -v "^\[gw.\] PASSED" | cut -c1-300 | head -20
grep -c PASSED $R/tests_graph_nan_lean_h200_run6.log
grep -E "FAILED|ERROR|passed|failed" $R/tests_triton_matches_h200_run6.log | cut -c1-300 | head; grep -c PASSED $R/tests_triton_matches_h200_run6.log
tail -7 $R/bench_d64.log; tail -7 $R/bench_d128.log; tail -3 $R/probe.log | cut -c1-400
cd $OUT && tar czf results.tgz r && rm -rf r
