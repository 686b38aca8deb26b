#!/bin/bash
# the compiled op's backward differentiating its forward's graph (no recomputation): the Llama
# step through torch.compile (default mode), the CUDA-graph / torch.compile GPU tests, and the
# Triton GPU tests touched this session (lsh hashing, long sequences)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 260 python3 benchmarks/bench_llama_step.py --compile default --skip-packed --impls sdpa,dense,hash16,keep0.7 --out $R/llama_step_compiled_h200.json > $R/llama.log 2>&1; echo "llama rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama.log | cut -c1-260
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py > $R/tests_graph.log 2>&1; echo "graph tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_graph.log | cut -c1-300 | tail -4
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_triton_gpu.py -k "lsh or hashing or long_sequences" > $R/tests_triton.log 2>&1; echo "triton tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_triton.log | cut -c1-300 | tail -4
