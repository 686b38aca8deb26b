"""A pattern's tile map as a picture: what the mask keeps, and which tiles the kernels visit.

``plot_tile_map(spec, png)`` compiles ``spec``, draws decisions on random q, k (seeded, so a
picture repeats), prepares the index tensors of ``backend`` (its tiling) and draws, for every
head, three panels: the element mask in original positions (the pattern's meaning), the same
mask in the layout's row order (after compaction and the sort by bucket), and the tile map in
layout order, coloured by :func:`tilesparse.ir.tile_classes` (full tiles run without the mask,
partial tiles, visited empty tiles, skipped tiles; a skipped tile that holds a kept element
would be a bug, drawn red). CPU is enough; the element masks cost T x T, hence ``MAX_T``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from .. import compile, parse_spec  # noqa: E402
from ..ir import layout_mask_rows, tile_classes, tile_stats, to_dense  # noqa: E402
from ..patterns import SpecBase  # noqa: E402

__all__ = ["MAX_HEADS", "MAX_T", "plot_tile_map"]

MAX_T, MAX_HEADS = 4096, 8
# colour and legend of each tile class, in the order of tilesparse.ir.inspect's codes
TILE_COLOURS = ("#ffffff", "#d62728", "#ffbf80", "#9ecae1", "#08519c")
TILE_LABELS = ("skipped", "skipped, holds a kept element (a bug)", "visited, empty", "visited, masked", "full, no mask")


def plot_tile_map(
    spec: SpecBase | dict | str,
    png: str | Path,
    *,
    seqlen: int = 1024,
    heads: int = 2,
    head_dim: int = 64,
    causal: bool = True,
    seed: int = 0,
    backend: str = "executor",
) -> Path:
    """Draw ``spec``'s element masks and tile map, one row per head, into ``png``."""
    spec = parse_spec(spec)
    if not 1 <= seqlen <= MAX_T:
        raise ValueError(f"seqlen must be in [1, {MAX_T}] (the element masks are T x T), got {seqlen}")
    if not 1 <= heads <= MAX_HEADS:
        raise ValueError(f"heads must be in [1, {MAX_HEADS}] (one row of panels each), got {heads}")
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, heads, seqlen, head_dim, generator=gen) for _ in range(3))
    attn = compile(spec, causal=causal, backend=backend)
    decisions = attn.decide(q, k, generator=torch.Generator().manual_seed(seed + 1))
    prepared = attn.prepare(q, k, v, decisions=decisions)
    mask = to_dense(prepared)[0]

    fig, axes = plt.subplots(heads, 3, figsize=(13, 4.2 * heads), squeeze=False)
    for g in prepared.groups:
        layout_mask = layout_mask_rows(g, 0, seqlen)[0]
        stats = tile_stats(g)
        for local, head in enumerate(g.heads):
            ax_mask, ax_layout, ax_tiles = axes[head]
            kept = int(mask[head].sum())
            ax_mask.imshow(mask[head].numpy(), cmap="Greys", interpolation="nearest")
            ax_mask.set_title(f"head {head}: element mask, original order ({kept:,} kept)", fontsize=9)
            ax_layout.imshow(layout_mask[local].numpy(), cmap="Greys", interpolation="nearest")
            ax_layout.set_title(f"head {head}: the same in layout order ({g.group.layout.value})", fontsize=9)
            classes = tile_classes(g, head=local)
            ax_tiles.imshow(classes.numpy(), cmap=ListedColormap(TILE_COLOURS), vmin=0, vmax=len(TILE_COLOURS) - 1,
                            interpolation="nearest")  # fmt: skip
            ax_tiles.set_title(
                f"head {head}: {g.block_q}x{g.block_k} tiles; its group visits {100 * stats['visited_fraction']:.1f}%"
                f" (ideal {100 * stats['ideal_fraction']:.1f}%)",
                fontsize=9,
            )
            for ax, unit in ((ax_mask, "position"), (ax_layout, "layout row"), (ax_tiles, "block")):
                ax.set_xlabel(f"key {unit}", fontsize=8)
                ax.set_ylabel(f"query {unit}", fontsize=8)
                ax.tick_params(labelsize=7)
    fig.legend(
        [Patch(facecolor=c, edgecolor="grey") for c in TILE_COLOURS], TILE_LABELS,
        loc="lower center", ncol=len(TILE_LABELS), fontsize=8, frameon=False,
    )  # fmt: skip
    fig.suptitle(
        f"{spec}, T={seqlen}, D={head_dim}, {'causal' if causal else 'non-causal'}, decisions drawn with seed "
        f"{seed} (backend {backend!r}'s tiling)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=100)
    plt.close(fig)
    return png
