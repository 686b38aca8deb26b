#!/bin/bash
# the session's last device run: GPU tests on two GPUs in parallel, then the benchmarks
set -u
source benchmarks/results/logs/device_prelude.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $R
nvidia-smi -L > $R/gpus.txt
( export CUDA_VISIBLE_DEVICES=0 TILESPARSE_GPU_EXAMPLES=48
  timeout 330 python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider tests/gpu/test_triton_gpu.py tests/gpu/test_planner_gpu.py tests/gpu/test_sdpa_gpu.py tests/gpu/test_reliability_gpu.py > $R/tests_gpu0.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_gpu0.log ) &
( export CUDA_VISIBLE_DEVICES=1
  timeout 170 python3 -m pytest -q -rfE -m gpu -n 6 -p no:cacheprovider tests/gpu/test_cupy_gpu.py tests/gpu/test_decode_gpu.py tests/gpu/test_padding_gpu.py > $R/tests_gpu1.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_gpu1.log
  timeout 110 python3 benchmarks/bench_decode.py --out $R > $R/bench_decode.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/bench_decode.log
  timeout 90 python3 benchmarks/bench_llama_step.py --out $R/llama_step_h200.json > $R/bench_llama.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/bench_llama.log ) &
wait
timeout 50 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_sequence_parallel_gpu.py > $R/tests_sp.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_sp.log
timeout 100 torchrun --nproc_per_node=2 benchmarks/bench_sequence_parallel.py --only time --t 131072 --iters 5 --out $R/bench_sequence_parallel_h200.json > $R/bench_sp.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/bench_sp.log
for f in $R/*.log; do echo "== $(basename $f)"; grep -E "passed|failed|rc=|Error|FAILED" $f | tail -8; done
cd $OUT && tar czf results.tgz r && rm -rf r
