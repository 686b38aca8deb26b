source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT/r
timeout 240 python3 benchmarks/probe_lsh.py --out $OUT/r/lsh > $OUT/r/probe_lsh.log 2>&1; echo probe rc=$?
timeout 300 python3 -m pytest -v -rfE -p no:cacheprovider -m gpu tests/gpu/test_triton_gpu.py -k "lsh or hashing or long_sequences or recompiles" tests/gpu/test_graph_capture_gpu.py -x > $OUT/r/tests.log 2>&1; echo tests rc=$?
tail -15 $OUT/r/tests.log | cut -c1-300
python3 - <<'P'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/lsh/probe_lsh.json"))
for r in d["rows"]:
    print(r["shape"], r["buckets"], r["hasher"], "torch", round(r["torch"], 3), "triton", round(r["triton"], 3), "cupy", round(r.get("cupy", 0), 3), "decide", round(r["decide"], 3), "agree", round(r["agree_torch"], 4), "ratio fwd", round(r["decide_ratio_fwd"], 3), "fwd_bwd", round(r["decide_ratio_fwd_bwd"], 3), "call fb", round(r["call_fwd_bwd"], 2))
P
