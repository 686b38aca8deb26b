#!/bin/bash
# #12: the final tree (index buffers lent per call, the non-finite flags zeroed in the index build): every built-in pattern at the two 4k shapes, each call
# timed three ways with the pool on and off in turns in each process (call_times.py --ab index-pool; one process
# per pattern and shape, compiling at once, timing in turns under a lock, 4 rounds)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct168; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 420 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 4 --calls 60 --ab index-pool \
      --lock /tmp/ct168 --expect 16 --wait-s 240 --out /tmp/ct168/$s-$p.json > /tmp/ct168/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/ct168/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct168/*.json --out $R/call_times_pool_run168_h200.json > $R/call_times_pool_run168.txt
echo "t=$(( $(date +%s) - T0 ))s"
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["R"] + "/call_times_pool_run168_h200.json"))["rows"]
print(f"{'row':40} {'mode':8} host on/off   sync on/off   sync/cuDNN on")
for key in sorted(d):
    for m in ("fwd", "fwd_bwd"):
        on, off, ref = d[key][m], d[key][m + "@off"], d[key]["sdpa_cudnn"][m]
        print(f"{key[-40:]:40} {m:8} {on['host']:5.0f} {off['host']:5.0f}   {on['sync']:5.0f} {off['sync']:5.0f}   {on['sync'] / ref['sync']:5.2f}")
PY
