#!/bin/bash
# the compiled Llama step (default mode) after the backward went back to recomputing the forward
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 250 python3 benchmarks/bench_llama_step.py --compile default --skip-packed --impls sdpa,dense,hash16,keep0.7 --out $R/llama_step_compiled_run37_h200.json > $R/llama.log 2>&1; echo "llama rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama.log | cut -c1-260
