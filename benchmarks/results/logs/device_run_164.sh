#!/bin/bash
# #12: kernel hits launched by cuLaunchKernel on a buffer packed once (launch.RawLaunch) instead of Triton's
# launcher: what one launch costs the host through each path (diag_raw_launch.py --part launch); whole calls at
# T=4,096 with RawLaunch on and off alternated in each process (--part calls, 8 processes compiling at once,
# timing in turns); then the GPU tests of the launch path (bitwise against Triton's normal path), capture,
# non-finite containment and Triton against the reference
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ab164
python3 benchmarks/results/logs/diag_raw_launch.py --part launch --out $R/diag_raw_launch_run164_h200.json 2>&1 | tail -3
echo "launch part t=$(( $(date +%s) - T0 ))s"
n=0
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in hash16 keep0.5 hybrid dense-triton; do
    python3 benchmarks/results/logs/diag_raw_launch.py --part calls --shapes $s --patterns $p --rounds 6 --calls 30 \
      --lock /tmp/ab164 --expect 8 --out /tmp/ab164/$s-$p.json > /tmp/ab164/$s-$p.log 2>&1 &
  done
done
wait
tail -2 /tmp/ab164/*.log | grep -i error | head
python3 benchmarks/results/logs/diag_raw_launch.py --summary $R/ab_raw_launch_run164_h200.json /tmp/ab164/*.json
echo "calls part t=$(( $(date +%s) - T0 ))s"
timeout 280 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py \
  "tests/gpu/test_triton_gpu.py::test_triton_matches_reference" -k "not float32" > $R/tests_run164.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run164.log | tail -12 | cut -c1-300
