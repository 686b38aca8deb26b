"""What a run prints: a progress line per row, and one table per mode at the end."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table

from .grid import MODES, PATTERNS

__all__ = ["log_line", "print_table"]

MODE_TITLES = {"fwd": "fwd", "fwd_bwd": "fwd+bwd"}


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def log_line(row: dict) -> str:
    """One row as a progress line: ours, flash and the speed-up."""
    ms, sp = row["ms"], row["speedup"]
    return (
        f"D={row['D']} T={row['T']} {row['pattern']} {row['mode']}: ours {fmt(ms.get('ours'))} ms, "
        f"flash {fmt(ms.get('sdpa_flash'))} ms, x{fmt(sp.get('ours_vs_sdpa_flash'))}"
        + (f", {len(row['errors'])} errors" if row["errors"] else "")
    )


def _table(rows: list[dict], meta: dict, mode: str) -> Table:
    table = Table(
        title=f"{MODE_TITLES[mode]} ms, {meta['device_name']}, B={meta['B']} H={meta['H']} {meta['dtype']} causal",
        caption="ours: decisions given; +dec: decided in the call; kern: attention kernels alone; prep: "
        "prepare() alone (wall), prepGPU: its kernels' GPU time; flex: block mask per call/prebuilt",
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True,
    )  # fmt: skip
    for col in (
        "pattern", "D", "T", "ours", "+dec", "kern", "prep", "prepGPU", "flash", "cudnn", "flex", "x flash",
        "visit%", "ideal%", "MiB ours/flash",
    ):  # fmt: skip
        table.add_column(col, justify="left" if col == "pattern" else "right", no_wrap=True)
    for r in rows:
        ms, sp, pk = r["ms"], r["speedup"], r["peak_mib"]
        ours = "err" if "ours" in r["errors"] else fmt(ms.get("ours"))
        if r["skipped"].get("all"):
            ours = "skipped"
        flex = "-" if not (ms.get("flex_percall") or ms.get("flex_prebuilt")) else (
            f"{fmt(ms.get('flex_percall'))}/{fmt(ms.get('flex_prebuilt'))}"
        )  # fmt: skip
        table.add_row(
            r["pattern"], str(r["D"]), str(r["T"]), ours, fmt(ms.get("ours_incl")), fmt(ms.get("kernels")),
            fmt(ms.get("prep")), fmt(ms.get("prep_gpu")),
            fmt(ms.get("sdpa_flash")), fmt(ms.get("sdpa_cudnn")), flex, fmt(sp.get("ours_vs_sdpa_flash")),
            pct(r.get("visited_fraction")), pct(r.get("ideal_fraction")),
            f"{fmt(pk.get('ours'), 5)}/{fmt(pk.get('sdpa_flash'), 5)}",
        )  # fmt: skip
    return table


def print_table(results: dict, console: Console | None = None) -> None:
    """Failed measurements first, then one compact table per mode run (forward+backward
    last); other numbers (speed-ups over Flex, spreads) are in the JSON."""
    console = console or Console(width=200, highlight=False)
    order = {p: i for i, p in enumerate(PATTERNS)}
    errors = [(r, n, m) for r in results["rows"] for n, m in r["errors"].items()]
    if errors:
        seen = set()
        console.print(f"{len(errors)} failed measurements (full messages in the JSON):")
        for r, n, m in errors:
            first = (m.splitlines() or [""])[0][:140]
            if (n, first[:80]) not in seen:
                seen.add((n, first[:80]))
                console.print(f"  D={r['D']} T={r['T']} {r['pattern']} {r['mode']} {n}: {first}")
    meta = results["meta"]
    if meta.get("stopped"):
        console.print(f"stopped early, later rows {meta['stopped']}")
    for mode in MODES:
        rows = [r for r in results["rows"] if r["mode"] == mode]
        if not rows:
            continue
        rows.sort(key=lambda r: (r["long"], r["D"], order.get(r["pattern"], 99), r["T"]))
        with console.capture() as cap:
            console.print(_table(rows, meta, mode))
        # rich pads every line to the table's width: strip it, so a captured tail holds rows
        print("\n".join(line.rstrip() for line in cap.get().splitlines()))
