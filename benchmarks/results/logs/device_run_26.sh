#!/bin/bash
# after the guard that keeps the forward's graph only outside CUDA graphs: the CUDA-graph /
# torch.compile GPU tests, and the Llama step under reduce-overhead (which must still capture)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py > $R/tests_graph.log 2>&1; echo "graph tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_graph.log | cut -c1-300 | tail -4
TORCH_LOGS=perf_hints timeout 200 python3 benchmarks/bench_llama_step.py --compile reduce-overhead --skip-packed --impls sdpa,hash16,keep0.7 --out $R/llama_step_ro_h200.json > $R/llama_ro.log 2>&1; echo "llama ro rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_ro.log | cut -c1-260
grep -i "skipping cudagraphs" $R/llama_ro.log | sort | uniq -c | cut -c1-250 | head -5
