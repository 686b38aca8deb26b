"""Helpers of the kernel A/B scripts in this folder (ab_gqa_sum.py, ab_keep_features.py): a
module of the library as an earlier commit had it, loaded beside today's, and a kernel's GPU
time from the profiler."""

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]


def module_at(commit: str, path: str, package: str):
    """The library module at ``path`` as commit ``commit`` had it (from git, or from
    build/<name>_<commit>.py where the tree has no history: ``git show COMMIT:PATH >
    build/NAME_COMMIT.py``), its relative imports made absolute in ``package``."""
    saved = ROOT / "build" / f"{Path(path).stem}_{commit}.py"
    if saved.exists():
        src = saved.read_text()
    else:
        src = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True,
                             text=True).stdout
    parent = package.rsplit(".", 1)[0]
    src = src.replace("from ...", f"from {parent.rsplit('.', 1)[0]}.").replace("from ..", f"from {parent}.")
    src = src.replace("from .", f"from {package}.")
    target = Path(tempfile.mkdtemp()) / f"{Path(path).stem}_{commit}.py"
    target.write_text(src)
    spec = importlib.util.spec_from_file_location(target.stem, target)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a dataclass of the module looks its module up there
    spec.loader.exec_module(mod)
    return mod


def profiled_us(fn, kernel: str, calls: int = 20) -> float:
    """The median GPU time (µs) of the kernels whose name starts with ``kernel`` over ``calls``
    calls of ``fn``, from the profiler."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times = sorted(e.device_time for e in prof.events() if e.name.startswith(kernel))
    return times[len(times) // 2] if times else float("nan")
