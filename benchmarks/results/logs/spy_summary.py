"""Sums py-spy's raw samples (``record -f raw``) of diag_host_spy.py into shares per function
and per line: the timed loop's samples (its line in the stack, LINE: 41 in run 170's version of
the script, 47 since) and the backward's, without compiles; and, apart, those without the given
decisions' check (``_check_on_device``).

    python3 spy_summary.py OUT.json LINE spy_*.raw
"""
import collections, json, sys


def shares(path: str, skip_check: bool, loop: str) -> dict:
    by_fn, self_fn, by_line = collections.Counter(), collections.Counter(), collections.Counter()
    total = 0
    for line in open(path):
        stack, n = line.rsplit(" ", 1)
        n = int(n)
        if loop not in stack and "backward" not in stack:
            continue  # not the timed loop (nor the autograd thread's backward)
        if "_do_compile" in stack or (skip_check and "_check_on_device" in stack):
            continue
        total += n
        frames = [f.split(" (")[0] + " " + f.split("/")[-1].rstrip(")") for f in stack.split(";")]
        fns = {f.rsplit(":", 1)[0] for f in frames}
        for f in fns:
            by_fn[f] += n
        self_fn[frames[-1].rsplit(":", 1)[0]] += n
        by_line[frames[-1]] += n
    pct = lambda c, k: {f: round(100 * v / total, 1) for f, v in c.most_common(k)}  # noqa: E731
    return {"samples": total, "inclusive_pct": pct(by_fn, 40), "self_pct": pct(self_fn, 30), "self_line_pct": pct(by_line, 30)}


loop = f"diag_host_spy.py:{int(sys.argv[2])}"
out = {p.split("/")[-1][4:-4]: {"all": shares(p, False, loop), "without_decision_check": shares(p, True, loop)}
       for p in sys.argv[3:]}
json.dump(out, open(sys.argv[1], "w"), indent=1)
