"""The sm_90 compile reports the compile tests read, reused while nothing they depend on changed.

A report (``sm90.compile_in_child``: registers, spills, shared memory per variant) depends only
on the kernels' sources, Triton's release and its ptxas. ``sm90_reports.json`` holds the reports
of the last full compile (``make test-compile-all`` writes it, with ``TILESPARSE_SM90_REPORTS=write``)
under the key of what they were made from: :func:`source_key`, a hash of every file of
``tilesparse/backends/triton`` and ``tilesparse/ir`` (the kernels, their launch and compile
parameters, the constants they import), the Triton release and ``TRITON_PTXAS_PATH``. A test
session whose key matches takes each report it needs from there; any other compiles them, as
before (a kernel change is compiled in CI until the file is written again). The spill tables
and every assertion are applied to the reports either way. ``TILESPARSE_SM90_REPORTS=compile``
ignores the file.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path

from tilesparse.backends.triton.sm90 import compile_in_child

REPORTS = Path(__file__).with_name("sm90_reports.json")
ROOT = Path(__file__).resolve().parents[3]
SOURCES = ("tilesparse/backends/triton", "tilesparse/ir")
MODE = "TILESPARSE_SM90_REPORTS"  # "write": compile and write the file; "compile": ignore it


def source_key(root: Path = ROOT) -> str:
    """What the reports are made from: the sources' paths and bytes, Triton's release and ptxas."""
    import triton

    h = hashlib.sha256()
    for folder in SOURCES:
        for path in sorted((root / folder).glob("*.py")):
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(f"triton {triton.__version__}\0ptxas {os.environ.get('TRITON_PTXAS_PATH', '')}".encode())
    return h.hexdigest()


def compiled(names: Iterable[str], *, gluon: bool, timeout: float = 1200, reports: Path = REPORTS,
             compile=compile_in_child) -> dict[str, dict]:  # fmt: skip
    """Each variant of ``names``: its report from ``reports`` when made from these sources, the
    others compiled (``compile``: ``sm90.compile_in_child``); with ``TILESPARSE_SM90_REPORTS=write``
    every one compiled, and the file's section for these kernels written."""
    names = set(names)
    kind = "gluon" if gluon else "triton"
    mode = os.environ.get(MODE, "")
    stored = json.loads(reports.read_text()) if reports.exists() else {}
    key = source_key()
    section = stored.get(kind, {})
    have = section.get("reports", {}) if section.get("key") == key and mode not in ("write", "compile") else {}
    missing = names - have.keys()
    made = compile(missing, gluon=gluon, timeout=timeout) if missing else {}
    if mode == "write":
        stored[kind] = {"key": key, "reports": dict(sorted(made.items()))}
        reports.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n")
    found = {**have, **made}
    return {n: found[n] for n in names if n in found}
