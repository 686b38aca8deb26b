"""``SparseAttention``: a compiled op as an ``nn.Module`` whose randomness is part of its state.

The module holds the op's seed as a buffer, so ``state_dict()`` saves it and
``load_state_dict()`` restores the same draws: with ``resample=False`` the LSH rotations (or
drop masks) of a layer are fixed and travel with the checkpoint; with ``resample=True`` the
layer draws fresh decisions every call from a sequence that restarts from the loaded seed.
The draws depend on the device type (CPU and CUDA generators differ).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .api import CompiledAttention, compile
from .patterns import SpecBase
from .randomness import check_seed, reset_generators

__all__ = ["SparseAttention"]


class SparseAttention(nn.Module):
    """``SparseAttention(spec, seed=0)(q, k, v, **call_kwargs)``: the compiled op of ``spec``
    (keyword arguments of :func:`tilesparse.compile`), seeded from a saved buffer."""

    def __init__(self, spec: SpecBase | dict | str, *, seed: int = 0, resample: bool = True, **compile_kwargs):
        super().__init__()
        check_seed(seed, resample)
        self.op: CompiledAttention = compile(spec, seed=seed, resample=resample, **compile_kwargs)
        self.register_buffer("seed", torch.tensor(seed, dtype=torch.int64))
        self.register_load_state_dict_post_hook(_reseed)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, **kwargs):
        return self.op(q, k, v, **kwargs)

    def extra_repr(self) -> str:
        return f"{self.op.spec}, causal={self.op.causal}, resample={self.op.resample}"


def _reseed(module: SparseAttention, incompatible_keys) -> None:
    module.op.seed = int(module.seed)
    reset_generators(module.op)
