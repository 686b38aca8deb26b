"""One line per kernel from Nsight Compute's raw page (``ncu -i REP --page raw --csv``): GPU time,
SM throughput, tensor-pipe activity, active warps, registers, and the leading warp-stall reasons
(cycles a warp waits per issued instruction, by reason).

    python3 benchmarks/results/logs/ncu_summary.py RAW.csv [STALLS]
"""

import csv
import re
import sys

STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")


def main() -> None:
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with open(path) as f:
        rows = [r for r in csv.reader(f)]
    start = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
    header, data = rows[start], [r for r in rows[start + 2 :] if len(r) == len(rows[start])]
    col = {h: i for i, h in enumerate(header)}

    def num(r, name):
        i = col.get(name)
        if i is None or r[i] in ("", "n/a"):
            return None
        return float(r[i].replace(",", ""))

    tensor = [h for h in header if re.fullmatch(r"sm__pipe_tensor(_op_gmma)?_cycles_active\.avg\.pct_of_peak_sustained_active", h)]
    stalls = {h: m.group(1) for h in header if (m := STALL.fullmatch(h))}
    unit = rows[start + 1][col["gpu__time_duration.sum"]]
    to_ms = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "s": 1e3, "second": 1e3}.get(unit, 1.0)
    print(f"tensor-pipe metrics: {tensor}")
    for r in data:
        name = r[col["Kernel Name"]][:48]
        ms = num(r, "gpu__time_duration.sum") * to_ms
        parts = [f"{name:48s}", f"{ms:8.3f} ms"]
        for label, key in (("sm", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                           ("warps", "sm__warps_active.avg.pct_of_peak_sustained_active"),
                           ("regs", "launch__registers_per_thread")):
            v = num(r, key)
            parts.append(f"{label} {v:.0f}" if v is not None else f"{label} -")
        for h in tensor:
            v = num(r, h)
            parts.append(f"{h.split('.')[0].removeprefix('sm__pipe_')} {v:.1f}%" if v is not None else "")
        lead = sorted(((num(r, h) or 0.0, reason) for h, reason in stalls.items()), reverse=True)[:top]
        parts.append("stalls: " + ", ".join(f"{s} {v:.2f}" for v, s in lead))
        print("  ".join(parts))


if __name__ == "__main__":
    main()
