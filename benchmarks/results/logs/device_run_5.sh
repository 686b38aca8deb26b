#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
PT="python3 -m pytest -q -rfE -m gpu -p no:cacheprovider"
# alone on the machine first: host time per call by stage
timeout 170 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns dense-triton,keep0.7,keep0.5,keep0.3,hash16,hash64,hybrid,perhead,topk8 --calls 100 > $R/probe.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/probe.log
( timeout 390 $PT -n 4 tests/gpu/test_triton_gpu.py tests/gpu/test_lean_launch_gpu.py > $R/tests_triton.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_triton.log ) &
(
timeout 130 $PT -n 2 tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py > $R/tests_graph_nan.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_graph_nan.log
timeout 60 $PT tests/gpu/test_cupy_gpu.py > $R/tests_cupy.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_cupy.log
timeout 190 $PT -n 2 tests/gpu/test_decode_gpu.py tests/gpu/test_padding_gpu.py > $R/tests_decode_padding.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_decode_padding.log
) &
wait
for f in $R/*.log; do echo "== $(basename $f)"; grep -E "passed|failed|rc=|^FAILED|Error" $f | tail -6; done
echo "== probe"; tail -40 $R/probe.log
cd $OUT && tar czf results.tgz r && rm -rf r
