#!/bin/bash
# #12: the README's training run at 16,384 tokens a step again (batch 2 at 8,192, 1 at 16,384),
# with this session's code (run 15 measured it last), to report the ratios as they are now
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
B=$(( 575 - ($(date +%s) - T0) ))
timeout $B python3 examples/train_lm.py --device cuda --t 8192,16384 --variants dense,hash16,keep0.7,hybrid --steps 400 --eval-every 50 --time-budget-s $((B - 40)) --name train_lm_h200_16k_tokens_run51 --out $R > $R/train.log 2>&1; echo "train rc=$? t=$(( $(date +%s) - T0 ))"
tail -14 $R/train.log
