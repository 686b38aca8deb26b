source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT/plain $OUT/wsdense $OUT/ws
timeout 150 python3 benchmarks/probe_ws_fwd.py --out $OUT/plain --variants plain --shapes 1x32x8x128x16384 2>&1 | tail -4 | cut -c1-700
timeout 100 python3 benchmarks/probe_ws_fwd.py --out $OUT/wsdense --variants ws --keeps 1.0 --shapes 1x32x8x128x16384 2>&1 | tail -3 | cut -c1-700
timeout 100 python3 benchmarks/probe_ws_fwd.py --out $OUT/ws --variants ws --keeps 0.7 --shapes 1x32x8x128x16384 2>&1 | tail -3 | cut -c1-700
