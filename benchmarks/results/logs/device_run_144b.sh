source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for s in 1,16,16,64,4096 1,32,8,128,4096; do
  python3 benchmarks/results/logs/diag_eager_bwd.py $s $R/diag_eager_bwd_${s//,/x}_run144_h200.json 2>&1 | tail -20
done | tee $R/diag_eager_bwd_run144.log
