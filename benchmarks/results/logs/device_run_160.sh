#!/bin/bash
# #12: the README's training run at 16,384 tokens a step (batch 2 at T=8,192, 1 at 16,384), eager, on the bound
# steps (792c55b): the run-138 command without --cuda-graphs
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
name=train_lm_h200_16k_tokens_run160
budget=$(( 560 - ($(date +%s) - T0) - 25 ))
timeout $(( budget + 20 )) python3 examples/train_lm.py --device cuda --t 8192,16384 --variants dense,hash16,keep0.7,hybrid \
  --steps 300 --eval-every 100 --time-budget-s $budget --name $name --out $R > $R/train_run160.log 2>&1
echo "train rc=$? budget=$budget t=$(( $(date +%s) - T0 ))"
python3 - $R/$name.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print(r["variant"], r["T"], r.get("steps_done"), r.get("step_ms_median"), r.get("cuda_graphs"), r.get("stopped"), (r.get("error") or "")[:200])
PY
