#!/bin/bash
# #12: the README's training run at 16,384 tokens a step (batch 2 at T=8,192, 1 at 16,384) on the current kernels
# (the Gluon forward and backward landed after runs 51 and 65), eagerly and with --cuda-graphs, 300 steps each
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for g in "" "--cuda-graphs"; do
  name=train_lm_h200_16k_tokens${g:+_graphs}_run138
  end=290; [ -n "$g" ] && end=565
  budget=$(( end - ($(date +%s) - T0) - 25 ))
  timeout $(( budget + 20 )) python3 examples/train_lm.py --device cuda --t 8192,16384 --variants dense,hash16,keep0.7,hybrid \
    --steps 300 --eval-every 100 --time-budget-s $budget $g --name $name --out $R > $R/train${g:+_graphs}.log 2>&1
  echo "train $g rc=$? budget=$budget t=$(( $(date +%s) - T0 ))"
  python3 - $R/$name.json <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print(r["variant"], r["T"], r.get("steps_done"), r.get("step_ms_median"), r.get("cuda_graphs"), r.get("stopped"), (r.get("error") or "")[:200])
PY
done
