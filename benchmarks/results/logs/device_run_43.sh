#!/bin/bash
# #12: a deciding call's host time before and after this session's small cuts (Decisions' field
# names as a tuple, QKDrop's draw compared once, the GPU's compute capability asked once): the old
# files (build/device/old/, from HEAD) in a copy of the tree, A B A B, each in its own process
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
rm -rf /tmp/old && cp -r $PWD /tmp/old && cp -r build/device/old/tilesparse/. /tmp/old/tilesparse/
for round in 1 2; do
  for tree in old new; do
    dir=$PWD; [ $tree = old ] && dir=/tmp/old
    PYTHONPATH=/tmp/site:$dir timeout 120 python3 benchmarks/results/logs/ab_decide.py $tree$round >> $R/ab_decide_h200.jsonl 2> $R/ab_$tree$round.err; echo "$tree$round rc=$?"
  done
done
python3 - <<'PY'
import json, os, collections
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/r/ab_decide_h200.jsonl")]
for r in rows:
    print(f"{r['tree']:5} {r['pattern']:8} decide {r['decide_us']:6.0f} us  fwd given {r['fwd_given_ms']:.3f}  made {r['fwd_made_ms']:.3f} ms")
PY
