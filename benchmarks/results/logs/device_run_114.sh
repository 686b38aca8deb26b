#!/bin/bash
# The tile configurations take the warp-specialized dK/dV kernel (16-bit D=64 from 1,024-row bucket segments,
# D=128 from 256; run 113): the GPU tests that run the Triton backend's backward (Triton kernels, the Gluon
# kernel, non-finite containment, CUDA graph capture and replay, the lean launch, padding), then the target
# shapes with the new defaults
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 330 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider --timeout 300 tests/gpu/test_triton_gpu.py \
  tests/gpu/test_gluon_dkdv_gpu.py tests/gpu/test_nan_containment_gpu.py tests/gpu/test_graph_capture_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_lean_launch_gpu.py tests/gpu/test_padding_gpu.py \
  > $R/tests_ws_default_run114.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
S="2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768"
timeout $(( 560 - ($(date +%s) - T0) )) python3 benchmarks/bench_models.py --out $R --tag targets_run114_h200 --shapes "$S" \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 > $R/bench_targets_run114.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "(FAILED|ERROR|passed|failed)" $R/tests_ws_default_run114.log | tail -15 | cut -c1-250
grep -v "^\[" $R/bench_targets_run114.log | grep -v -i warn | tail -20 | cut -c1-130
