source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT/a $OUT/b
timeout 100 python3 benchmarks/probe_ws_fwd.py --out $OUT/a --variants ws-nopos,plain-nopos --keeps 1.0 --shapes 1x32x8x128x16384 2>&1 | tail -2 | cut -c1-900
CUDA_LAUNCH_BLOCKING=1 timeout 100 python3 benchmarks/probe_ws_fwd.py --out $OUT/b --variants ws --keeps 1.0 --shapes 1x32x8x128x16384 2>&1 | grep -v "^ " | tail -6 | cut -c1-400
