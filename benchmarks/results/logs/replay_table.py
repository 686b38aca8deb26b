"""Print probe_host.py's eager, make_graphed_callables and cuda_graphs=True rows side by side (us)."""
import json
import sys

KEYS = ("call_fwd_host", "graphed_fwd_host", "replay_fwd_host", "replay_fwd_decide_host",
        "call_fwd_bwd_host", "graphed_fwd_bwd_host", "replay_fwd_bwd_host",
        "call_fwd_bwd_sync", "graphed_fwd_bwd_sync", "replay_fwd_bwd_sync")
rows = json.load(open(sys.argv[1]))["rows"]
print("shape pattern", *(k.replace("_host", "").replace("call_", "eager_") for k in KEYS), "replay_max_err")
for r in rows:
    cells = [f"{r[k]:.0f}" if k in r else "-" for k in KEYS]
    print(r["shape"], r["pattern"], *cells, r.get("replay_max_err", "-"), r.get("replay_error", "")[:200])
