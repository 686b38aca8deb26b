#!/bin/bash
# #12: the index build's sort keys and scatter in one launch (index._sort_scatter, while a side has at most 16
# chunks) and groups copied per lent entry: every built-in pattern at the two 4k shapes, and QKDrop(0.5) at 16k (16
# one-hot chunks a side: the most rows each program counts), each call timed three ways with the one-launch sort on
# and off in turns in each process (call_times.py --ab fused-sort; one process per pattern and shape, compiling at
# once, timing in turns under a lock, 4 rounds)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct172; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 420 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 4 --calls 60 --ab fused-sort \
      --lock /tmp/ct172 --expect 18 --wait-s 240 --out /tmp/ct172/$s-$p.json > /tmp/ct172/$s-$p.log 2>&1 &
  done
  s16=${s%4096}16384
  timeout 420 python3 benchmarks/call_times.py --shapes $s16 --patterns keep0.5 --rounds 4 --calls 60 --ab fused-sort \
    --lock /tmp/ct172 --expect 18 --wait-s 240 --out /tmp/ct172/$s16-keep0.5.json > /tmp/ct172/$s16-keep0.5.log 2>&1 &
done
wait
grep -il "error\|Traceback" /tmp/ct172/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct172/*.json --out $R/call_times_sort_run172_h200.json > $R/call_times_sort_run172.txt
echo "t=$(( $(date +%s) - T0 ))s"
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["R"] + "/call_times_sort_run172_h200.json"))["rows"]
print(f"{'row':40} {'mode':8} host on/off   b2b on/off   sync on/off   sync/cuDNN on")
for key in sorted(d):
    for m in ("fwd", "fwd_bwd"):
        on, off, ref = d[key][m], d[key][m + "@off"], d[key]["sdpa_cudnn"][m]
        print(f"{key[-40:]:40} {m:8} {on['host']:5.0f} {off['host']:5.0f}   {on['b2b']:5.0f} {off['b2b']:5.0f}   {on['sync']:5.0f} {off['sync']:5.0f}   {on['sync'] / ref['sync']:5.2f}")
PY
