source benchmarks/results/logs/device_prelude.sh
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
timeout 300 python3 benchmarks/probe_tma.py --out $OUT/r/tma16k --shape 1,32,16384,128 > $OUT/r/tma16k.log 2>&1; echo tma rc=$?
timeout 200 python3 build/device/diag_bwd.py > $OUT/r/diag.log 2>&1; echo diag rc=$?
grep -v "^=====" $OUT/r/diag.log | grep -E "^1x|floor|^\{" | cut -c1-400
python3 - <<'P'
import json, os
d = json.load(open(os.environ["OUT"] + "/r/tma16k/probe_tma.json"))
for r in d["rows"]:
    print(r["mode"], r.get("block_m"), r.get("block_n"), r.get("warps"), r.get("stages"), "ws" if r.get("warp_specialized") else "", round(r.get("ms", 0), 2), round(r.get("tflops", 0)), r.get("error", "")[:80])
P
