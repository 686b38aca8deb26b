"""Benchmarks shipped with the package: :mod:`.attention` (the timing grid) and :mod:`.plot`
(its figure); :mod:`.tile_map` draws a pattern's masks and tile map (``python -m tilesparse plot``).

They import matplotlib and rich, and time on CUDA when a GPU is present; nothing in the
library imports them. ``benchmarks/bench_attention.py`` and ``python -m tilesparse bench`` run
the same code.
"""
