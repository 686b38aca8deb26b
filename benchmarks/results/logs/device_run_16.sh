#!/bin/bash
# #14/#12: the Llama step through torch.compile (default, reduce-overhead) with the sdpa-keypad baseline
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
for mode in default reduce-overhead; do
  B=$(( 560 - ($(date +%s) - T0) ))
  timeout $B python3 benchmarks/bench_llama_step.py --compile $mode --skip-packed --impls sdpa,sdpa-keypad,dense,hash16,keep0.7 --out $R/llama_step_$mode.json > $R/llama_$mode.log 2>&1
  echo "llama $mode rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_$mode.log | cut -c1-300
done
(cd $OUT && tar czf results.tgz r && rm -rf r)
