#!/bin/bash
# after run 63: one fused copy per dtype into a slot (torch._foreach_copy_) and out of it for the
# gradients, the stream read by one C call; the graphs GPU tests again (the sync test counted
# captures wrongly for Dense), host time per call (eager / make_graphed_callables / the op's
# replay) at T=4,096, then the Llama step at 4,096 tokens, eager, without and with cuda_graphs=True
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 120 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graphs_gpu.py \
  > $R/tests_graphs_run64.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_graphs_run64.log | cut -c1-300
timeout 260 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 \
  --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 --calls 30 --stat median > $R/probe.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; mv $R/probe/probe_host.json $R/probe_host_replay_run64_h200.json
python3 benchmarks/results/logs/replay_table.py $R/probe_host_replay_run64_h200.json
for g in "" "--cuda-graphs"; do
  timeout 90 python3 benchmarks/bench_llama_step.py --t 4096 --skip-packed --impls sdpa,hash16,keep0.7 $g \
    --out $R/llama_step_t4096${g:+_graphs}_run64_h200.json > $R/llama_4096${g:+_g}.log 2>&1
  echo "llama 4096 $g rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_4096${g:+_g}.log | cut -c1-250
done
