#!/bin/bash
# the op's call with SDPA keywords under torch.compile after the unknown-keyword check became a
# loop dynamo traces (torch 2.11's dynamo could not subtract a frozenset from dict keys), then the
# compiled Llama step (Hash(16), Dense) after the backward went back to recomputing the forward
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 60 python3 benchmarks/results/logs/compiled_keywords_check.py 2>&1 | tail -3
timeout 170 python3 benchmarks/bench_llama_step.py --compile default --skip-packed --impls hash16,dense --out $R/llama_step_compiled_run38_h200.json > $R/llama.log 2>&1; echo "llama rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama.log | cut -c1-260
