#!/bin/bash
# #12: a call with decisions made in it hashes the lsh buckets then builds into the bound build's lent buffers
# (TritonBuilder.bind_hashing; it built through build_group, a new binding and buffer a call): first the GPU tests of
# that path (the Triton builder hashing in its index step, the planner's builders, CUDA graph capture of decided
# calls), then run 174's measurement again with times back to back and synchronized (diag_decide_kernels.py --times)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 260 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_planner_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_triton_gpu.py -k "hash or lsh or index_building" > $R/tests_run175.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run175.log | tail -8 | cut -c1-300
timeout 240 python3 benchmarks/results/logs/diag_decide_kernels.py $R/decide_kernels_run175_h200.json --times > $R/decide_kernels_run175.log 2>&1
echo "kernels rc=$? t=$(( $(date +%s) - T0 ))s"
grep -v Warn $R/decide_kernels_run175.log | cut -c1-120 | tail -30
