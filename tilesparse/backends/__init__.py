"""Backends: reference (the oracle), executor (the kernels' torch model), sdpa (dense groups),
triton (tile-skipping kernels; needs CUDA or TRITON_INTERPRET=1). They depend on the IR only;
importing this package registers them in :data:`REGISTRY`."""

# the triton backend imports triton lazily: without it, it registers and reports a reason
from . import executor, reference, sdpa, triton
from .base import REGISTRY, Backend, register

__all__ = ["REGISTRY", "Backend", "executor", "reference", "register", "sdpa", "triton"]
