#!/bin/bash
# a seeded op's decide as a cudagraph-unsafe custom op: the CUDA-graph GPU tests, and the Llama
# step through torch.compile(mode="reduce-overhead") with Hash(16) (which stopped before)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
TORCH_LOGS=perf_hints timeout 200 python3 benchmarks/bench_llama_step.py --compile reduce-overhead --skip-packed --impls sdpa,hash16,keep0.7 --out $R/llama_step_ro_h200.json > $R/llama_ro.log 2>&1; echo "llama ro rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_ro.log | cut -c1-300
grep -i "skipping cudagraphs\|partition" $R/llama_ro.log | sort | uniq -c | cut -c1-250 | head -10
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py > $R/tests_graph_run17.log 2>&1; echo "graph tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_graph_run17.log | cut -c1-300 | tail -6
(cd $OUT && tar czf results.tgz r && rm -rf r)
