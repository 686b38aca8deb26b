#!/bin/bash
# #12: given TopKFeatures supports checked by one launch per field (idcheck._check_support) instead of
# about thirty torch ops. The GPU tests it touches (the support kernel against the torch ops at model
# sizes; capture and replay of every built-in pattern), then host time per call A/B against the tree
# before it (ab_base/: HEAD's tilesparse and probe_host.py, copied in for this run only; TopKFeatures
# and Hash(16) as a control, 3 alternating rounds, each its own process), then the README's host
# table at T=4,096 on the new code (eager, make_graphed_callables, cuda_graphs=True; SDPA)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R/ab
timeout 170 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider --timeout 160 tests/gpu/test_reliability_gpu.py \
  tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py > $R/tests_run137.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -2 $R/tests_run137.log | cut -c1-250
grep -E "(FAILED|ERROR)" $R/tests_run137.log | head -8 | cut -c1-300
AB="--shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns topk8,hash16 --calls 30 --stat median --no-graphed --no-replay"
for round in 1 2 3; do
  for tree in base new; do
    script=benchmarks/probe_host.py; [ $tree = base ] && script=ab_base/$script
    timeout 60 python3 $script --out $R/ab/$tree$round $AB > $R/ab/$tree$round.log 2>&1
    echo "ab $tree $round rc=$? t=$(( $(date +%s) - T0 ))"
  done
done
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 \
  --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 --calls 30 --stat median > $R/probe.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; mv $R/probe/probe_host.json $R/probe_host_run137_h200.json
python3 benchmarks/results/logs/replay_table.py $R/probe_host_run137_h200.json 2>&1 | tail -24
python3 - <<'PY'
import glob, json, os, statistics
R = os.environ["OUT"] + "/r/ab"
rows = {}
for f in sorted(glob.glob(R + "/*/probe_host.json")):
    tree = os.path.basename(os.path.dirname(f)).rstrip("123")
    for r in json.load(open(f))["rows"]:
        for key in ("decision_checks", "call_fwd_host", "call_fwd_bwd_host", "call_fwd_sync", "call_fwd_bwd_sync"):
            if key in r:
                rows.setdefault((r["shape"], r["pattern"], key), {}).setdefault(tree, []).append(round(r[key], 1))
for (shape, pat, key), v in rows.items():
    print(shape, pat, key, "base", v.get("base"), "new", v.get("new"))
PY
tar -C $R -czf $R/ab_run137.tgz ab && rm -rf $R/ab $R/probe
