#!/bin/bash
# #11's closing run on the current defaults (the Gluon forward, dQ and dK/dV kernels at D=128): the model-shape grid
# (README tables), the B=2 H=12 D=64 / D=128 grid, TopKFeatures at D=256, the planner check over the model grid, then
# Nsight Compute on one forward+backward of QKDrop(0.7) and of cuDNN's SDPA at B=1 H=32 Hkv=8 D=128 32k
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R/ncu
timeout 140 python3 benchmarks/bench_models.py --out $R --tag models_run135_h200 > $R/bench_models_run135.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))"
timeout 100 python3 benchmarks/bench_models.py --out $R --tag targets_grid_run135_h200 \
  --shapes "2,12,12,64,16384;2,12,12,128,16384" --patterns dense,keep0.7,keep0.5,keep0.3,hash16,hash64 \
  > $R/bench_targets_grid_run135.log 2>&1; echo "targets rc=$? t=$(( $(date +%s) - T0 ))"
timeout 70 python3 benchmarks/bench_models.py --out $R --tag topk_run135_h200 --shapes "1,4,4,256,65536" \
  --patterns topk8,topk8@triton > $R/bench_topk_run135.log 2>&1; echo "topk rc=$? t=$(( $(date +%s) - T0 ))"
timeout 130 python3 -m tilesparse.bench.planner_check --grid models --reps 10 --out $R/planner_check_models_run135_h200.json \
  > $R/planner_models_run135.log 2>&1; echo "planner rc=$? t=$(( $(date +%s) - T0 ))"
TM=""
for m in sm__pipe_tensor_op_gmma_cycles_active sm__pipe_tensor_cycles_active; do
  ncu --query-metrics --chip gh100 2>/dev/null | grep -q "^$m " && TM="$TM,$m.avg.pct_of_peak_sustained_active"
done
echo "tensor metrics: ${TM#,}"
for pat in keep0.7 cudnn; do
  left=$(( 585 - ($(date +%s) - T0) )); [ $left -lt 40 ] && { echo "ncu $pat skipped"; continue; }
  timeout $left ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis ${TM:+--metrics ${TM#,}} \
    -o $R/ncu/ncu_${pat}_32k -f python3 benchmarks/ncu_target.py $pat 32768 > $R/ncu/ncu_${pat}_32k.log 2>&1
  echo "ncu $pat rc=$? t=$(( $(date +%s) - T0 ))"
  ncu -i $R/ncu/ncu_${pat}_32k.ncu-rep --page raw --csv > $R/ncu/ncu_${pat}_32k_raw.csv 2>&1
  ncu -i $R/ncu/ncu_${pat}_32k.ncu-rep --page details > $R/ncu/ncu_${pat}_32k_details.txt 2>&1
  python3 benchmarks/results/logs/ncu_summary.py $R/ncu/ncu_${pat}_32k_raw.csv 5 | cut -c1-250
  gzip -f $R/ncu/ncu_${pat}_32k_raw.csv; rm -f $R/ncu/ncu_${pat}_32k.ncu-rep
done
grep -E "rows within" $R/planner_models_run135.log; grep -v " ok" $R/planner_models_run135.log | tail -6 | cut -c1-180
for f in bench_targets_grid_run135 bench_topk_run135; do grep -v "^\[" $R/$f.log | grep -v -i warn | tail -14 | cut -c1-130; done
grep -v "^\[" $R/bench_models_run135.log | grep -v -i warn | tail -24 | cut -c1-130
