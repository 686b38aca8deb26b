#!/bin/bash
# #11: Nsight Compute's warp-stall samples per SASS line of the two backward kernels (dQ, dK/dV),
# QKDrop(0.7) at B=1, H=32, Hkv=8, D=128, T=32,768: what keeps the backward at 0.6x cuDNN's rate
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R/ncu
for kern in dkdv dq; do
  timeout 200 ncu --clock-control none --profile-from-start off --kernel-name regex:"_attn_bwd_$kern" --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section Occupancy --section LaunchStats \
    -o $R/ncu/bwd_${kern}_keep0.7 -f python3 benchmarks/ncu_target.py keep0.7 32768 > $R/ncu/bwd_$kern.log 2>&1
  echo "ncu $kern rc=$? t=$(( $(date +%s) - T0 ))"
  ncu -i $R/ncu/bwd_${kern}_keep0.7.ncu-rep --page source --csv --print-source sass > $R/ncu/bwd_${kern}_sass.csv 2> $R/ncu/bwd_${kern}_sass.err
  ncu -i $R/ncu/bwd_${kern}_keep0.7.ncu-rep --page details --print-details all > $R/ncu/bwd_${kern}_details.txt 2>&1
  wc -c $R/ncu/bwd_${kern}_sass.csv; head -c 300 $R/ncu/bwd_${kern}_sass.err
  python3 benchmarks/results/logs/ncu_stalls.py $R/ncu/bwd_${kern}_sass.csv 20 > $R/ncu/bwd_${kern}_stalls.txt 2>&1
  head -40 $R/ncu/bwd_${kern}_stalls.txt | cut -c1-200
  gzip -f $R/ncu/bwd_${kern}_sass.csv; rm -f $R/ncu/bwd_${kern}_keep0.7.ncu-rep
done
