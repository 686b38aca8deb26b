#!/bin/bash
# decisions made in the call against given, with the op's calls replayed (--cuda-graphs): the
# rows of bench_decide_h200.json (logs/device_run_27.sh) again, B=2, H=12
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/bench_attention.py --grid full --d 64,128 --t 16384,32768 --patterns hash8,hash16,hash64,hybrid \
  --decide both --flex none --no-long --budget-s 230 --cuda-graphs --out $R/bench_decide_graphs_run68_h200.json > $R/decide.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/bench_decide_graphs_run68_h200.json"))
for r in d["rows"]:
    ms = r.get("ms", {})
    if "ours" in ms and "ours_incl" in ms:
        print(r["pattern"], r["D"], r["T"], r["mode"], round(ms["ours"], 3), round(ms["ours_incl"], 3),
              f"{100 * (ms['ours_incl'] / ms['ours'] - 1):+.1f}%")
PY
