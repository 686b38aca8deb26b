#!/bin/bash
# #14/#12: the Llama step eager and through torch.compile (reduce-overhead, default), after the
# integration's mask builder and the SDPA-keyword custom op
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
for mode in none reduce-overhead default; do
  B=$(( 585 - ($(date +%s) - T0) ))
  timeout $B python3 benchmarks/bench_llama_step.py --compile $mode --skip-packed --out $R/llama_step_$mode.json > $R/llama_$mode.log 2>&1
  echo "llama $mode rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_$mode.log
done
grep -c "Recompiling\|Graph break" $R/llama_*.log
(cd $OUT && tar czf results.tgz r && rm -rf r)
