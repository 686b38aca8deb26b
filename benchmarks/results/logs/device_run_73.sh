#!/bin/bash
# (run with its own script, benchmarks/results/logs/diag_{replay,block,bwd_replay,replay_steps}.py; merged after the runs into
# diag_replay_host.py, one mode each, with the same code)
# where a replayed call's host time goes (#12): host time of the call and of its two graphs'
# replay() alone, a torch.profiler table (CUDA API included) and a cProfile, at T=4,096
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for s in 1,16,16,64,4096 1,32,8,128,4096; do
  timeout 150 python3 benchmarks/results/logs/diag_replay_host.py profile $s $R/diag_replay_${s//,/x}_run73_h200.json keep0.7,hash64,topk8 \
    > $R/diag_replay_${s//,/x}.log 2>&1
  echo "diag $s rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/diag_replay_${s//,/x}.log | cut -c1-300
done
