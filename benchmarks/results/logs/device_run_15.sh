#!/bin/bash
# #12: the CUDA-graph / compile GPU tests after the op change; the training section at 16,384
# tokens a step; #14: the Llama step eager with the sdpa-keypad baseline
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py > $R/tests_graph_run15.log 2>&1; echo "graph tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_graph_run15.log | cut -c1-300 | tail -8
timeout 120 python3 benchmarks/bench_llama_step.py --impls sdpa,sdpa-keypad,dense,hash16,keep0.7 --out $R/llama_step_h200.json > $R/llama_none.log 2>&1; echo "llama none rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_none.log | cut -c1-300
B=$(( 585 - ($(date +%s) - T0) ))
timeout $B python3 examples/train_lm.py --device cuda --t 8192,16384 --variants dense,hash16,keep0.7,hybrid --steps 400 --eval-every 50 --time-budget-s $((B - 40)) --name train_lm_h200_16k_tokens --out $R > $R/train.log 2>&1; echo "train rc=$? t=$(( $(date +%s) - T0 ))"
tail -12 $R/train.log
(cd $OUT && tar czf results.tgz r && rm -rf r)
