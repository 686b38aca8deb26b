#!/bin/bash
# Ran 2026-12-03 (run 139). One GPU test failed: test_reduce_overhead_matches_eager[topk] (fixed, rerun in run 140)
# #12: a call's given ids checked in one launch, two fields a launch (idcheck.check_ids_into), where
# each field took its own; an op's own TopKFeatures supports selected by one launch on CUDA
# (topk.topk_abs_into) instead of the criterion's torch ops. The GPU tests they touch (both kernels
# against the torch ops at model sizes; capture and replay of every built-in pattern), then host time
# per call A/B against the tree before them (ab_base/: a0d1e18's tilesparse and probe_host.py, copied
# in for this run only:
# git archive a0d1e18 tilesparse benchmarks/probe_host.py | tar -x -C ab_base; Hash(16), the hybrid,
# TopKFeatures and QKDrop(0.7) as a control (no ids to check), 3 alternating rounds, each its own process)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R/ab
timeout 200 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider --timeout 180 tests/gpu/test_reliability_gpu.py \
  tests/gpu/test_topk_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_graphs_gpu.py > $R/tests_run139.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -2 $R/tests_run139.log | cut -c1-250
grep -E "(FAILED|ERROR)" $R/tests_run139.log | head -8 | cut -c1-300
AB="--shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns hash16,hybrid,topk8,keep0.7 --calls 30 --stat median --no-graphed --no-replay"
for round in 1 2 3; do
  for tree in base new; do
    script=benchmarks/probe_host.py; [ $tree = base ] && script=ab_base/$script
    timeout 100 python3 $script --out $R/ab/$tree$round $AB > $R/ab/$tree$round.log 2>&1
    echo "ab $tree $round rc=$? t=$(( $(date +%s) - T0 ))"
  done
done
python3 - <<'PY' | tee $R/ab_summary.txt
import glob, json, os, statistics
R = os.environ["OUT"] + "/r/ab"
rows = {}
for f in sorted(glob.glob(R + "/*/probe_host.json")):
    tree = os.path.basename(os.path.dirname(f)).rstrip("123")
    for r in json.load(open(f))["rows"]:
        for key in ("decision_checks", "decide", "call_fwd_host", "call_fwd_bwd_host", "call_fwd_sync",
                    "call_fwd_bwd_sync", "call_fwd_decide_host", "call_fwd_decide_sync"):
            if key in r:
                rows.setdefault((r["shape"], r["pattern"], key), {}).setdefault(tree, []).append(round(r[key], 1))
for (shape, pat, key), v in rows.items():
    print(shape, pat, key, "base", v.get("base"), "new", v.get("new"))
PY
python3 - <<'PY'
import glob, json, os
R = os.environ["OUT"] + "/r"
out = {"meta": {"what": "host time per call A/B: HEAD against a0d1e18 (ab_base/), 3 alternating rounds"}, "rounds": {}}
for f in sorted(glob.glob(R + "/ab/*/probe_host.json")):
    out["rounds"][os.path.basename(os.path.dirname(f))] = json.load(open(f))
json.dump(out, open(R + "/ab_id_check_pairs_run139_h200.json", "w"), indent=1)
PY
tar -C $R -czf $R/ab_run139.tgz ab && rm -rf $R/ab
