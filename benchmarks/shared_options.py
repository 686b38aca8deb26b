"""Command-line options that several benchmark scripts share: the attention heads and head
dim, and the warm-up, backend and smoke-run options of a timed script.

Imported as ``benchmarks.shared_options`` by scripts that put the checkout's root on
``sys.path`` (they all do, to run without installing)."""

from __future__ import annotations

import argparse


def add_head_options(p: argparse.ArgumentParser, *, heads: int, kv_heads: int, head_dim: int | None = None) -> None:
    """``--heads``, ``--kv-heads`` and, unless ``head_dim`` is None (a model that derives it
    from its width), ``--head-dim``."""
    p.add_argument("--heads", type=int, default=heads)
    p.add_argument("--kv-heads", type=int, default=kv_heads)
    if head_dim is not None:
        p.add_argument("--head-dim", type=int, default=head_dim)


def add_run_options(p: argparse.ArgumentParser, *, smoke_help: str, warmup: int = 3) -> None:
    """``--warmup`` (untimed calls first), ``--backend`` (tilesparse's, ``auto`` by default)
    and ``--smoke`` (a tiny CPU run that checks the script: ``smoke_help`` says what it does)."""
    p.add_argument("--warmup", type=int, default=warmup)
    p.add_argument("--backend", default="auto")
    p.add_argument("--smoke", action="store_true", help=smoke_help)
