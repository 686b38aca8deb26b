"""Run the attention benchmark grid: ``python benchmarks/bench_attention.py --grid targets``.

The code lives in :mod:`tilesparse.bench.attention` (its docstring says what is timed and how);
this script and ``python -m tilesparse bench`` are the same entry point (``tilesparse.bench.command``).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from tilesparse.bench.command import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
