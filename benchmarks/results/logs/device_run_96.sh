#!/bin/bash
# Host time per stage with each index builder: the op on backend="auto" (the planner's builder: CuPy's
# where its line prices lower) against backend="triton" (Triton's own builder), Hybrid and Hash(16),
# at B=2 H=12 D=64 16k/32k and B=1 H=32 Hkv=8 D=128 32k (the planner check's one miss: the hybrid's
# forward at D=64 32k, CuPy's build, 22-29% slower while its kernels are faster)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for b in auto triton; do
  timeout 240 python3 benchmarks/probe_host.py --out $R/probe_host_$b --backend $b --calls 50 --no-graphed --no-replay \
    --shapes 2x12x12x64x32768,2x12x12x64x16384,1x32x8x128x32768 --patterns hybrid,hash16 > $R/probe_host_$b.log 2>&1
  echo "probe $b rc=$? t=$(( $(date +%s) - T0 ))"
done
python3 - <<'PY'
import json, os
R = os.environ["OUT"] + "/r"
cols = ("index_builders", "decision_checks", "index", "launches_index", "attend_fwd", "call_fwd_host", "call_fwd_sync",
        "call_fwd_bwd_host", "call_fwd_bwd_sync", "call_fwd_decide_host", "call_fwd_decide_sync")
for b in ("auto", "triton"):
    for r in json.load(open(f"{R}/probe_host_{b}/probe_host.json"))["rows"]:
        if r["pattern"] != "sdpa":
            print(b, r["shape"], r["pattern"], *(f"{c}={r[c]:.0f}" if isinstance(r[c], float) else f"{c}={r[c]}" for c in cols))
PY
