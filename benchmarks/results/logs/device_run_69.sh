#!/bin/bash
# what replaying costs where the kernels dominate: probe_host.py's synchronized eager and replayed
# calls (one process) at T=32,768 and 16,384, B=2 H=12 D=128 and B=1 H=32 Hkv=8 D=128
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 400 python3 benchmarks/probe_host.py --out $R/probe --shapes 2x12x12x128x16384,2x12x12x128x32768,1x32x8x128x32768 \
  --patterns hash16,keep0.7 --calls 10 --stat median --no-graphed > $R/probe.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; mv $R/probe/probe_host.json $R/probe_host_replay_long_run69_h200.json
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/probe_host_replay_long_run69_h200.json"))
for r in d["rows"]:
    if r["pattern"] == "sdpa":
        print(r["shape"], "sdpa", round(r["call_fwd_sync"]), round(r["call_fwd_bwd_sync"])); continue
    f, fr, b, br = r["call_fwd_sync"], r.get("replay_fwd_sync", 0), r["call_fwd_bwd_sync"], r.get("replay_fwd_bwd_sync", 0)
    print(r["shape"], r["pattern"], "fwd", round(f), round(fr), f"{100*(fr/f-1):+.1f}%", "fwd_bwd", round(b), round(br),
          f"{100*(br/b-1):+.1f}%", r.get("replay_error", "")[:200])
PY
