"""Op-owned randomness: the generator a compiled op's criteria draw from when the call gives none.

``ts.compile(spec, seed=None)`` (the default) draws from torch's global generator on every
call, as dropout does. With ``seed=s``:

- ``resample=True``: the op owns one generator per device, seeded with ``s`` on first use;
  every call draws fresh decisions (fresh LSH rotations, as SCFA resamples per step) from a
  sequence that repeats run to run;
- ``resample=False``: every call draws from a generator freshly seeded with ``s``: the same
  rotations (or drop masks of a given shape) on every call, so two identical forwards agree.

A call's ``generator=`` always wins; ``decisions=`` bypasses the criteria altogether. The
draws depend on the device type (CPU and CUDA generators differ), not on the device index.
"""

from __future__ import annotations

import torch

__all__ = ["check_seed", "op_generator", "reset_generators"]


def check_seed(seed: object, resample: object) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise ValueError(f"seed must be a non-negative int or None, got {seed!r}")
    if not isinstance(resample, bool):
        raise TypeError(f"resample must be a bool, got {resample!r}")


def op_generator(attn, device: torch.device) -> torch.Generator | None:
    """The generator ``attn``'s criteria use on ``device`` when a call passes none; None means
    torch's global generator (``attn.seed`` is None)."""
    seed = getattr(attn, "seed", None)
    if seed is None:
        return None
    if not getattr(attn, "resample", True):
        return torch.Generator(device).manual_seed(seed)
    gens = attn.__dict__.setdefault("_generators", {})
    key = (torch.device(device).type, torch.device(device).index)
    gen = gens.get(key)
    if gen is None:
        gen = gens[key] = torch.Generator(device).manual_seed(seed)
    return gen


def reset_generators(attn) -> None:
    """Forget the op's per-device generators: the next call starts the sequence of ``attn.seed``
    again (after a new seed is set, e.g. from a state dict)."""
    attn.__dict__.pop("_generators", None)
    for op in attn.__dict__.get("_variants", {}).values():
        op.seed, op.resample = attn.seed, attn.resample
        reset_generators(op)
