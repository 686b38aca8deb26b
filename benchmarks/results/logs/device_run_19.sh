source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT
timeout 300 python3 build/device/diag_host2.py 2>&1 | tee $OUT/diag_host2.log | cut -c1-1500
