"""Warp-stall samples of one kernel by reason and by SASS instruction, from Nsight Compute's
source page (``ncu -i REP --page source --csv --print-source sass``, gzipped or not).

    python3 benchmarks/results/logs/ncu_stalls.py FILE.csv[.gz] [TOP]
"""

import collections
import csv
import gzip
import io
import sys


def main() -> None:
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    header, data = rows[1], [r for r in rows[2:] if len(r) == len(rows[1])]
    col = {h: i for i, h in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    samples = col["Warp Stall Sampling (All Samples)"]
    total = sum(int(r[samples] or 0) for r in data)
    by_reason = collections.Counter()
    for r in data:
        for h in reasons:
            if r[col[h]] not in ("", "-"):
                by_reason[h] += int(r[col[h]])
    print(f"{total} samples")
    for h, n in by_reason.most_common():
        if n:
            print(f"  {h.removeprefix('stall_'):18s} {n / total:6.1%}")
    print(f"top {top} instructions (share of samples, address, SASS, leading reasons):")
    ranked = sorted(data, key=lambda r: -int(r[samples] or 0))[:top]
    for r in ranked:
        lead = sorted(((int(r[col[h]]), h.removeprefix("stall_")) for h in reasons if r[col[h]] not in ("", "-", "0")),
                      reverse=True)[:2]
        print(f"  {int(r[samples]) / total:5.1%} {r[col['Address']][-5:]} {r[col['Source']].strip()[:56]:56s} "
              + ", ".join(f"{h} {n / int(r[samples]):.0%}" for n, h in lead))


if __name__ == "__main__":
    main()
