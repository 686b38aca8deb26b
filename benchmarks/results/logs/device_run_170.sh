#!/bin/bash
# #12: where a call's host time goes on the GPU machine (py-spy samples, diag_host_spy.py), the tree at 88cb9da
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R/spy
SPY=/tmp/site/bin/py-spy
i=0
for cfg in "1x16x16x64x4096 hash16" "1x16x16x64x4096 keep0.5" "1x32x8x128x4096 hash16" "1x32x8x128x4096 keep0.5"; do
  for mode in fwd fwd_bwd; do
    set -- $cfg
    ( $SPY record -r 2000 -f raw -o /tmp/spy_${1}_${2}_${mode}.raw -- python3 benchmarks/results/logs/diag_host_spy.py $1 $2 $mode 20 \
        > /tmp/spy_${1}_${2}_${mode}.log 2>&1 ) &
  done
done
wait
cat /tmp/spy_*.log | grep -v "^py-spy\|^$" | tail -40
cd /tmp && tar czf $R/spy/spy_raw.tgz spy_*.raw spy_*.log && ls -la $R/spy
echo "t=$(( $(date +%s) - T0 ))s"
