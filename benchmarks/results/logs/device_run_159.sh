#!/bin/bash
# #12: every call timed three ways (host from idle, back to back, synchronized) against cuDNN and flash SDPA in
# the same process, on the bound steps (792c55b): B=1 H=16 D=64 and B=1 H=32 Hkv=8 D=128, T=4,096, ten patterns.
# One process per pattern and shape: all compile at once, then each times alone holding a lock (call_times.py).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
L=$R/call_times; mkdir -p $L
P="dense-triton keep0.7 keep0.5 keep0.3 hash8 hash16 hash64 hybrid perhead topk8"; S="1x16x16x64x4096 1x32x8x128x4096"
n=0; for s in $S; do for p in $P; do n=$((n+1)); done; done
for s in $S; do for p in $P; do
  ( timeout 500 python3 benchmarks/call_times.py --patterns $p --shapes $s --lock $L --expect $n --wait-s 330 \
      --out $L/${p}_$s.json > $L/${p}_$s.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $L/${p}_$s.log ) &
done; done
wait; echo "timed t=$(( $(date +%s) - T0 ))s"
grep -h "rc=" $L/*.log | sort | uniq -c | head; grep -ho '"warm_s": [0-9.]*' $L/*.json | tr '\n' ' '; echo
ls ~/.triton/cache 2>/dev/null | wc -l; echo "TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-unset} HOME=$HOME"
python3 benchmarks/call_times.py --merge $L/*.json --out $R/call_times_run159_h200.json
tar czf $R/call_times_logs_run159.tgz -C $L $(cd $L && ls *.log)
