source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT/r
timeout 200 python3 benchmarks/probe_lsh.py --out $OUT/r/lsh > $OUT/r/probe_lsh.log 2>&1; echo probe rc=$?
timeout 200 python3 benchmarks/bench_features.py --out $OUT/r/index --index-only > $OUT/r/index.log 2>&1; echo index rc=$?
python3 -m tilesparse.planner.calibrate benchmarks/results/bench_targets_h200.json benchmarks/results/planner_check_h200.json $OUT/r/index/bench_features.json --out $OUT/r/costs.json > $OUT/r/calibrate.log 2>&1; echo calibrate rc=$?
cp $OUT/r/costs.json tilesparse/planner/costs.json
timeout 120 python3 benchmarks/explain_h200.py > $OUT/r/explain_h200.txt 2>&1; echo explain rc=$?
timeout 240 python3 -m pytest -v -rfE -p no:cacheprovider -m gpu tests/gpu/test_graph_capture_gpu.py -x > $OUT/r/tests_graph.log 2>&1; echo tests rc=$?
tail -4 $OUT/r/tests_graph.log | cut -c1-300
head -14 $OUT/r/explain_h200.txt
python3 - <<'P'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/lsh/probe_lsh.json"))
for r in d["rows"]:
    print(r["shape"], r["buckets"], r["hasher"], "decide", round(r["decide"], 3), "ratio fwd", round(r["decide_ratio_fwd"], 3), "fwd_bwd", round(r["decide_ratio_fwd_bwd"], 3), "call fb", round(r["call_fwd_bwd"], 2))
d = json.load(open(os.environ["OUT"] + "/r/index/bench_features.json"))
for r in d["index_build"]:
    print(r["T"], r["spec"][:20], {k: round(v["ms"], 3) for k, v in r.items() if isinstance(v, dict) and "ms" in v})
P
