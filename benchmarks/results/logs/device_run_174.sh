#!/bin/bash
# #12: where a call with decisions made in it spends its time, at the decide goal's shapes (B=2, H=12, T=16k/32k):
# GPU time per kernel against the call with decisions given (torch.profiler, diag_decide_kernels.py), then py-spy
# samples of the decided call's host time (diag_host_spy.py fwd_decide, non-blocking sampling)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/results/logs/diag_decide_kernels.py $R/decide_kernels_run174_h200.json > $R/decide_kernels_run174.log 2>&1
echo "kernels rc=$? t=$(( $(date +%s) - T0 ))s"
SPY=/tmp/site/bin/py-spy
for cfg in "2x12x12x64x16384 hash16" "2x12x12x64x16384 hybrid" "2x12x12x128x16384 hash64"; do
  set -- $cfg
  ( $SPY record --nonblocking -r 1000 -f raw -o /tmp/spy_${1}_${2}_fwd_decide.raw -- python3 benchmarks/results/logs/diag_host_spy.py $1 $2 fwd_decide 15 \
      > /tmp/spy_${1}_${2}_fwd_decide.log 2>&1 ) &
done
wait
cat /tmp/spy_*.log | grep -v "^py-spy\|^$" | tail -10
python3 benchmarks/results/logs/spy_summary.py $R/spy_decide_run174_h200.json 47 /tmp/spy_*.raw
cat /tmp/spy_*.log | grep -v "^py-spy\|^$" > $R/spy_decide_run174.log
echo "t=$(( $(date +%s) - T0 ))s"
tail -40 $R/decide_kernels_run174.log | cut -c1-400
