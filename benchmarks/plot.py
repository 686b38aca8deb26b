"""Redraw a benchmark figure: ``python benchmarks/plot.py results.json out.png``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from tilesparse.bench.plot import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
