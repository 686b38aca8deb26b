#!/bin/bash
# every target row again after the counting-sort change (the B=2, H=12 rows and D=64 Hash(64) /
# QKDrop(0.3) were last timed before it); Nsight Compute's warp-stall samples
# per SASS line of the Hash(16) and QKDrop(0.7) forward kernels at D=128, T=32k
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R/ncu
timeout 200 python3 benchmarks/bench_models.py --out $R --tag targets_run58_h200 \
  --shapes "2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 \
  > $R/bench_targets_run58.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -25 $R/bench_targets_run58.log
for p in hash16 keep0.7; do
  timeout 150 ncu --clock-control none --profile-from-start off --kernel-name regex:"_attn_fwd" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight -o $R/ncu/fwd_$p -f \
    python3 benchmarks/ncu_target.py $p 32768 > $R/ncu/fwd_$p.log 2>&1; echo "ncu $p rc=$? t=$(( $(date +%s) - T0 ))"
  ncu -i $R/ncu/fwd_$p.ncu-rep --page source --csv --print-source sass > $R/ncu/fwd_${p}_sass.csv 2> $R/ncu/fwd_${p}_sass.err
  ncu -i $R/ncu/fwd_$p.ncu-rep --page details --print-details all > $R/ncu/fwd_${p}_details.txt 2>&1
  wc -c $R/ncu/fwd_${p}_sass.csv; head -c 600 $R/ncu/fwd_${p}_sass.err
done
cd $R && tar czf ncu.tgz ncu && rm -rf ncu
