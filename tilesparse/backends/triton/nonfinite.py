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

__all__ = ["launch_pair", "new_flags"]


def new_flags(device: torch.device) -> tuple[Tensor, Tensor]:
    """Zeroed int32 flags on ``device`` for a call's two passes, the forward's and the
    backward's (dQ then dK/dV): one allocation and one fill, for a group whose build wrote no
    flags of its own (``PreparedGroup.flags``: Triton's build zeroes two in its index buffer,
    in its last launch). Launch arguments, never read on the host (graph-capturable). A second
    backward of one call (``retain_graph``) finds the backward's flag as the first left it:
    set, its sanitizing variants compute again, exactly, only slower."""
    return torch.zeros(2, dtype=torch.int32, device=device).unbind()


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
