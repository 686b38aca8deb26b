#!/bin/bash
# #12: run 161's call times again with four rounds per process (its host's times moved up to 2x between two
# rounds of one row), then the eager training run of run 160 again (a second sample of each step time)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
L=/tmp/call_times; mkdir -p $L
P="dense-triton keep0.7 keep0.5 keep0.3 hash8 hash16 hash64 hybrid perhead topk8"; S="1x16x16x64x4096 1x32x8x128x4096"
n=0; for s in $S; do for p in $P; do n=$((n+1)); done; done
for s in $S; do for p in $P; do
  ( timeout 420 python3 benchmarks/call_times.py --patterns $p --shapes $s --lock $L --expect $n --wait-s 380 \
      --rounds 4 --calls 120 --out $L/${p}_$s.json > $L/${p}_$s.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $L/${p}_$s.log ) &
done; done
wait; echo "timed t=$(( $(date +%s) - T0 ))s"; grep -h "rc=" $L/*.log | cut -d' ' -f1 | sort | uniq -c
python3 benchmarks/call_times.py --merge $L/*.json --out $R/call_times_run162_h200.json > $R/call_times_run162.txt
tar czf $R/call_times_logs_run162.tgz -C $L $(cd $L && ls *.log)
name=train_lm_h200_16k_tokens_run162
budget=$(( 575 - ($(date +%s) - T0) - 20 ))
timeout $(( budget + 15 )) python3 examples/train_lm.py --device cuda --t 8192,16384 --variants dense,hash16,keep0.7,hybrid \
  --steps 300 --eval-every 100 --time-budget-s $budget --name $name --out $R > $R/train_run162.log 2>&1
echo "train rc=$? budget=$budget t=$(( $(date +%s) - T0 ))"; grep "^| " $R/train_run162.log | head -12
cat $R/call_times_run162.txt
