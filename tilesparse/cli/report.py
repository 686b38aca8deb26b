"""What the subcommands print about a compiled op: its plan, tile statistics and tile maps."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..ir import Prepared, tile_stats

__all__ = ["TILE_LEGEND", "make_console", "tile_stats_of", "tile_table", "visited_fraction"]

TILE_LEGEND = (
    "tile map legend: '#' full tile, run without the mask; '+' partial tile, visited; "
    "'o' visited but empty; '.' skipped; '!' holds a kept element but was skipped (a bug)"
)


def make_console(*, stderr: bool = False) -> Console:
    """A console that prints the library's text as is: no markup (plans contain [brackets]),
    no highlighting, and no wrapping of long plan lines."""
    return Console(stderr=stderr, markup=False, highlight=False, soft_wrap=True)


def tile_stats_of(prepared: Prepared) -> list[dict[str, float]]:
    """Exact tile statistics (visited, ideal, missed, ...) of every head group."""
    return [tile_stats(g, exact=True) for g in prepared.groups]


def visited_fraction(stats: list[dict[str, float]], key: str = "visited") -> float:
    """Tiles counted under ``key`` over the dense (causal) tile count, across groups."""
    return sum(s[key] for s in stats) / max(sum(s["dense_tiles"] for s in stats), 1)


def tile_table(prepared: Prepared, stats: list[dict[str, float]]) -> Table:
    """One row per head group: layout, tiles visited against ideal (holding a kept element)
    and dense, tiles run without the mask, skipped tiles holding a kept element (must be 0)."""
    table = Table(title=f"tiles per head group ({prepared.groups[0].block_q} x {prepared.groups[0].block_k})")
    for name in ("group", "heads", "layout", "visited", "ideal", "dense", "no mask", "missed"):
        table.add_column(name, justify="left" if name in ("heads", "layout") else "right", no_wrap=True)
    for i, (g, s) in enumerate(zip(prepared.groups, stats, strict=True)):
        table.add_row(
            str(i),
            ",".join(map(str, g.heads)),
            g.group.layout.value,
            f"{s['visited']} ({100 * s['visited_fraction']:.0f}%)",
            str(s["ideal"]),
            str(s["dense_tiles"]),
            str(s["unmasked"]),
            str(s["missed"]),
        )
    return table
