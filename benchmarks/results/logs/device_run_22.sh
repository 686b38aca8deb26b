source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT
timeout 400 python3 benchmarks/probe_ws_fwd.py --out $OUT 2>&1 | tee $OUT/probe_ws_fwd.log | cut -c1-900
