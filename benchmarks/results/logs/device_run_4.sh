#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $R
PT="python3 -m pytest -q -rfE -m gpu -p no:cacheprovider"
# GPU 0: the GPU tests
(
export CUDA_VISIBLE_DEVICES=0
timeout 200 $PT -n 3 tests/gpu/test_triton_gpu.py tests/gpu/test_lean_launch_gpu.py > $R/tests_triton.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_triton.log
timeout 200 $PT -n 3 tests/gpu/test_planner_gpu.py tests/gpu/test_sdpa_gpu.py tests/gpu/test_reliability_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py > $R/tests_shard3.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_shard3.log
timeout 120 $PT -n 3 tests/gpu/test_decode_gpu.py tests/gpu/test_padding_gpu.py > $R/tests_decode_padding.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_decode_padding.log
timeout 100 $PT -n 3 tests/gpu/test_cupy_gpu.py > $R/tests_cupy.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_cupy.log
) &
# GPU 1: explain, host probe, model-shape rows, planner check
(
export CUDA_VISIBLE_DEVICES=1
timeout 60 python3 benchmarks/explain_h200.py > $R/explain_h200.txt 2> $R/explain.err; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/explain.err
timeout 150 python3 benchmarks/probe_host.py --out $R/probe_d64 --shapes 1x16x16x64x4096 --calls 100 > $R/probe_d64.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/probe_d64.log
timeout 150 python3 benchmarks/probe_host.py --out $R/probe_d128 --shapes 1x32x8x128x4096 --calls 100 > $R/probe_d128.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/probe_d128.log
timeout 150 python3 benchmarks/bench_models.py --out $R --tag models4k_h200 --shapes "1,16,16,64,4096;1,32,8,128,4096" > $R/bench_4k.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/bench_4k.log
timeout 110 python3 benchmarks/bench_models.py --out $R --tag targets_rerun_h200 --shapes "1,32,8,128,32768;2,12,12,64,16384" --patterns dense,keep0.7,keep0.5,hash16 > $R/bench_targets.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/bench_targets.log
) &
wait
for f in $R/*.log $R/explain.err; do echo "== $(basename $f)"; grep -E "passed|failed|rc=|FAILED|Error" $f | tail -6; done
echo "== probe"; tail -25 $R/probe_d64.log; tail -25 $R/probe_d128.log
echo "== bench"; tail -30 $R/bench_4k.log; tail -14 $R/bench_targets.log
cd $OUT && tar czf results.tgz r && rm -rf r
