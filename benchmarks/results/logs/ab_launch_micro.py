"""Two lean-launch micro-costs on and off, call by call (``ab_calls.py`` with ``--ab launch-micro``):
every lean launch reading the current device through ``torch._C._cuda_getDevice`` (off: through
``torch.cuda.current_device``, its Python wrapper and lazy-init check) and ``op.Launch.site``
keying its sites by the kernel's id (off: by the kernel itself, whose hash is a Python method).

    python3 ab_launch_micro.py --shapes ... --patterns ... --modes ... --pairs N --out OUT.json
"""

import contextlib
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
import ab_calls  # noqa: E402
import call_times  # noqa: E402
from tilesparse.backends.triton import launch as L  # noqa: E402
from tilesparse.backends.triton import op  # noqa: E402


def _kernels() -> list:
    kernels = list(L._LEAN.values())
    for name in ("gluon_fwd", "gluon_dq", "gluon_dkdv"):
        module = sys.modules.get(f"tilesparse.backends.triton.{name}")
        if module is not None:
            kernels.append(module._launcher())
    return kernels


def _site_by_kernel(self, kernel, flag=None):
    key = ("by-kernel", kernel, flag)
    site = self.sites.get(key)
    if site is None:
        constants = self.constants if flag is None else {**self.constants, flag: True}
        site = self.sites[key] = L.Site(L.lean(kernel), self.grid, constants)
    return site


@contextlib.contextmanager
def before():
    """The lean launches as before the change: the device read through torch.cuda, sites keyed
    by the kernel."""
    kernels = _kernels()
    saved = [k._device for k in kernels]
    site = op.Launch.site
    for k in kernels:
        k._device = torch.cuda.current_device
    op.Launch.site = _site_by_kernel
    try:
        yield
    finally:
        op.Launch.site = site
        for k, d in zip(kernels, saved, strict=True):
            k._device = d


call_times.SWITCHES["launch-micro"] = before

if __name__ == "__main__":
    if "--ab" not in sys.argv:
        sys.argv[1:1] = ["--ab", "launch-micro"]
    ab_calls.main()
