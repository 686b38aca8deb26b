#!/bin/bash
# compile(cuda_graphs=True) (tilesparse.graphs): its GPU tests and the graph-capture ones, then
# host time per call eager / make_graphed_callables / the op's own replay at T=4,096, then the
# Llama step at 16,384 and 4,096 tokens, eager, with and without cuda_graphs=True
# (two calls: `bash device_run_63.sh tests`, then `bash device_run_63.sh llama`)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
if [ "$1" = tests ]; then
timeout 200 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graphs_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_graphs_run63.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -15 $R/tests_graphs_run63.log | cut -c1-300
timeout 300 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 \
  --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 --calls 30 --stat median > $R/probe.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; cp $R/probe/probe_host.json $R/probe_host_replay_run63_h200.json
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/probe_host_replay_run63_h200.json"))
keys = ("call_fwd_host", "call_fwd_bwd_host", "graphed_fwd_host", "graphed_fwd_bwd_host", "replay_fwd_host",
        "replay_fwd_bwd_host", "call_fwd_bwd_sync", "replay_fwd_bwd_sync")
print("shape pattern " + " ".join(keys) + " max_err")
for r in d["rows"]:
    print(r["shape"], r["pattern"], " ".join(f"{r.get(k, float('nan')):.0f}" for k in keys), r.get("replay_max_err"),
          r.get("replay_error", "")[:200])
PY
else
for t in 16384 4096; do for g in "" "--cuda-graphs"; do
  timeout 100 python3 benchmarks/bench_llama_step.py --t $t --skip-packed --impls sdpa,hash16,keep0.7 $g \
    --out $R/llama_step_t${t}${g:+_graphs}_run63_h200.json > $R/llama_${t}${g:+_g}.log 2>&1
  echo "llama $t $g rc=$? t=$(( $(date +%s) - T0 ))"; grep "^{" $R/llama_${t}${g:+_g}.log | cut -c1-250
done; done
fi
