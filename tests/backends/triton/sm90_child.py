"""Run a script that compiles kernels for sm_90 in a child process (this one runs Triton's
interpreter, whose kernels cannot be compiled), and read the JSON line it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run_compiling(*args: str, timeout: int = 600) -> dict:
    """``python *args`` from the repository root without the interpreter, this checkout first on
    the path, Triton's cache under build/; its last line of output, parsed."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "TRITON_INTERPRET": "0", "PYTHONPATH": path}
    env.setdefault("TRITON_CACHE_DIR", str(ROOT / "build" / "triton-cache"))
    done = subprocess.run([sys.executable, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
