"""What ptxas makes of fewer sanitizing launches (``backends/triton/nonfinite.py``), compiled for
sm_90 on the CPU with the installed Triton (no GPU), per variant the report of ``sm90.report``:

- the forward that sanitizes in its own launch (``Variant(local=True)``, ``local_sanitize``)
  beside the forward it would replace, with the LDL/STL spills of each loop of its SASS in
  address order (the unchanged path's loops first, then the sanitizing loops behind the branch);
- the backward's two sanitizing variants in one kernel (``Variant("bwd_sanitize")``,
  ``merged_sanitize``), which runs only when a value was not finite: that it compiles and fits
  the shared memory a block may use.

    TRITON_INTERPRET=0 python3 sanitizing_launches_sm90.py OUT.json
"""

import dataclasses
import json
import re
import subprocess
import sys
import tempfile

import torch
import triton

from tilesparse.backends.triton import sm90
from tilesparse.backends.triton.op import tile_config

CASES = [(torch.bfloat16, 64, "hash"), (torch.bfloat16, 64, "drop"), (torch.float16, 64, "hash"),
         (torch.float16, 64, "drop"), (torch.float32, 64, "hash"), (torch.bfloat16, 32, "hash"),
         (torch.bfloat16, 128, "hash"), (torch.bfloat16, 128, "drop")]


def loop_spills(compiled) -> list[dict]:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([sm90._cuobjdump(), "-sass", f.name], capture_output=True, text=True, check=True).stdout
    insts = [(int(m.group(1), 16), m.group(2)) for m in
             (re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?);", line) for line in sass.splitlines()) if m]
    loops = sorted({(int(b.group(1), 16), a) for a, t in insts
                    if (b := re.search(r"\bBRA\s+(?:`\()?0x([0-9a-f]+)", t)) and int(b.group(1), 16) < a})
    return [{"start": hex(lo), "instructions": (hi - lo) // 16,
             "spills": sum(1 for a, t in insts if lo <= a <= hi and re.search(r"\b(LDL|STL)\b", t))}
            for lo, hi in loops]


# the merged backward sanitizing kernel: (dtype, head dim, flags, gqa)
MERGED = [(torch.bfloat16, 64, "hash", False), (torch.bfloat16, 64, "drop", True), (torch.float16, 64, "hash", True),
          (torch.bfloat16, 128, "hash", True), (torch.bfloat16, 128, "drop", True), (torch.float32, 64, "hash", False),
          (torch.float16, 16, "hash", False), (torch.bfloat16, 256, "hash", True), (torch.float32, 256, "hash", True)]

rows = []
for dtype, d, flags, gqa in MERGED:
    cfg = tile_config(d, dtype, torch.device("cuda"))
    v = sm90.Variant("bwd_sanitize", dtype, d, sm90.HASH_CAUSAL if flags == "hash" else sm90.DROP_CAUSAL, cfg, gqa=gqa)
    rep = dataclasses.asdict(sm90.report(sm90.compile_variant(v)))
    rows.append({"variant": str(v), "report": rep, "fits_shared": rep["shared"] <= sm90.SHARED_LIMIT})
    print(str(v)[:48], rep, flush=True)
for dtype, d, flags in CASES:
    cfg = tile_config(d, dtype, torch.device("cuda"))
    for local in (False, True):
        v = sm90.Variant("fwd", dtype, d, sm90.HASH_CAUSAL if flags == "hash" else sm90.DROP_CAUSAL, cfg, local=local)
        c = sm90.compile_variant(v)
        row = {"variant": str(v), "local": local, "report": dataclasses.asdict(sm90.report(c))}
        if local:
            row["loops"] = loop_spills(c)
        rows.append(row)
        print(str(v)[:40], row["report"], row.get("loops", ""), flush=True)
json.dump({"meta": {"triton": triton.__version__, "command": " ".join(sys.argv)}, "rows": rows},
          open(sys.argv[1], "w"), indent=1)
