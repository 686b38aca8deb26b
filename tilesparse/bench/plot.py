"""The benchmark's figure: speed-up over SDPA flash against T, one panel per head dim.

``plot(results, png_path)`` reads what ``tilesparse.bench.attention.run`` returns (or its JSON file) and
draws, for every pattern, ours (forward+backward, decisions excluded) as a solid line and
FlexAttention with its block mask prebuilt as a dashed line of the same colour. Run it alone
to redraw a figure: ``python benchmarks/plot.py results.json out.png``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator  # noqa: E402

__all__ = ["main", "plot"]


def plot(results: dict | str | Path, png_path: str | Path) -> Path:
    """Draw the speed-up figure of ``results`` (a dict or a JSON path) into ``png_path``."""
    if not isinstance(results, dict):
        results = json.loads(Path(results).read_text())
    meta = results.get("meta", {})
    rows = [r for r in results.get("rows", []) if not r.get("long")]
    mode = "fwd_bwd" if any(r.get("mode") == "fwd_bwd" for r in rows) else "fwd"  # a --modes fwd run
    rows = [r for r in rows if r.get("mode") == mode]
    dims = sorted({r["D"] for r in rows}) or [None]
    order = list(dict.fromkeys(r["pattern"] for r in rows))
    colours = {p: plt.get_cmap("tab10")(i % 10) for i, p in enumerate(order)}

    fig, axes = plt.subplots(1, len(dims), figsize=(6.5 * len(dims), 4.8), squeeze=False)
    for ax, D in zip(axes[0], dims, strict=True):
        drawn = False
        for pattern in order:
            mine = sorted((r for r in rows if r["D"] == D and r["pattern"] == pattern), key=lambda r: r["T"])
            for key, style, label in (
                ("ours_vs_sdpa_flash", "-", pattern),
                ("flex_prebuilt_vs_sdpa_flash", "--", f"{pattern} Flex (prebuilt)"),
            ):
                pts = [(r["T"], r["speedup"][key]) for r in mine if r.get("speedup", {}).get(key)]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, style, marker="o", markersize=3, color=colours[pattern], label=label)
                    drawn = True
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ts = sorted({r["T"] for r in rows if r["D"] == D})
        if ts:
            ax.set_xticks(ts, [f"{t // 1024}k" if t >= 1024 else str(t) for t in ts])
            ax.xaxis.set_minor_locator(NullLocator())
        if drawn:
            ax.set_yscale("log")
            plain = FuncFormatter(lambda y, _: f"{y:g}")
            ax.yaxis.set_major_formatter(plain)
            ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
            ax.yaxis.set_minor_formatter(plain)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel("sequence length T")
        ax.set_ylabel(f"speed-up over SDPA flash ({mode.replace('_', '+')})")
        ax.set_title(
            f"D={D}, B={meta.get('B')}, H={meta.get('H')}, {meta.get('dtype', '')}, "
            f"{meta.get('device_name', '')}",
            fontsize=9,
        )
        ax.grid(True, which="both", alpha=0.3)
    handles = {}
    for ax in axes[0]:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    bottom = 0.0
    if handles:
        rows_of_legend = -(-len(handles) // 6)
        bottom = min(0.4, 0.05 * rows_of_legend + 0.03)
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=6, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    png_path = Path(png_path)
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=120, bbox_inches="tight")  # tight: the legend below is never clipped
    plt.close(fig)
    return png_path


def main(argv: list[str] | None = None) -> int:
    """``RESULTS.json OUT.png``: draw the figure and print its path."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python benchmarks/plot.py RESULTS.json OUT.png", file=sys.stderr)
        return 2
    print(plot(argv[0], argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
