#!/bin/bash
# the Llama step at 16,384 tokens, eager, without and with cuda_graphs=True; then the README's
# training run at 16,384 tokens a step with --cuda-graphs (dense replayed too)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for g in "" "--cuda-graphs"; do
  timeout 90 python3 benchmarks/bench_llama_step.py --t 16384 --skip-packed --impls sdpa,hash16,keep0.7 $g \
    --out $R/llama_step_t16384${g:+_graphs}_run65_h200.json > $R/llama_16384${g:+_g}.log 2>&1
  echo "llama 16384 $g rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_16384${g:+_g}.log | cut -c1-250
done
left=$(( 560 - ($(date +%s) - T0) - 40 ))
timeout $(( left + 30 )) python3 examples/train_lm.py --device cuda --t 8192,16384 --variants dense,hash16,keep0.7,hybrid \
  --steps 300 --eval-every 100 --time-budget-s $left --cuda-graphs --name train_lm_h200_16k_tokens_graphs_run65 --out $R \
  > $R/train.log 2>&1; echo "train rc=$? budget=$left t=$(( $(date +%s) - T0 ))"
python3 examples/train_lm.py --report $R/train_lm_h200_16k_tokens_graphs_run65.json 2>&1 | tail -12
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/train_lm_h200_16k_tokens_graphs_run65.json"))
for r in d["runs"]:
    print(r["variant"], r["T"], r.get("steps_done"), r.get("step_ms_median"), r.get("cuda_graphs"), r.get("stopped"), (r.get("error") or "")[:300])
PY
