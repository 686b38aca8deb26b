"""The device-side flag that sends a launch to the kernels' sanitizing variants.

A masked tile multiplies probabilities that are exactly 0 by every k and v (and q, dO) row
it visits, and 0 * inf is NaN: an inf or NaN at a key can reach rows that do not keep it, and
only as a NaN in their outputs. So each kernel's unchanged variant runs first and sets the flag
when a value it stores is not finite; an output without one is exact. Its sanitizing variant
runs next and exits at once unless the flag is set (kernels.py): inputs without a non-finite
value run the unchanged loops, plus one reduction over each output tile and two launches that
do nothing, and nothing reads the inputs a second time.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .launch import lean

__all__ = ["launch_pair", "new_flag"]


def new_flag(device: torch.device) -> Tensor:
    """A zeroed int32 (1,) flag on ``device`` for one pass (forward, or dQ then dK/dV): a
    launch argument, never read on the host (graph-capturable)."""
    return torch.zeros(1, dtype=torch.int32, device=device)


def launch_pair(kernel, grid, *args, unchanged=None, **kwargs) -> None:
    """Launch ``kernel``'s unchanged variant, then its sanitizing one (``SANITIZE=True``) with
    the same arguments, the flag among them: the second computes the outputs again only when
    the first stored a value that is not finite (or, for dK/dV, when the dQ kernel did, in
    which case the unchanged dK/dV variant stores nothing). The two launches share one reading
    of the arguments (their specialization key and addresses).

    ``unchanged``: a function of ``(grid, args)`` that stands in for the unchanged variant (a
    kernel computing the same outputs under the same flag protocol: gluon_dkdv.py)."""
    launcher = lean(kernel)
    keyed = launcher.keyed(args)
    if unchanged is None:
        launcher.launch(grid, args, kwargs, keyed)
    else:
        unchanged(grid, args)
    launcher.launch(grid, args, {**kwargs, "SANITIZE": True}, keyed)
