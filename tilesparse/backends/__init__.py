"""Backends: reference (the oracle), executor (the kernels' torch model), sdpa (dense groups),
triton (tile-skipping kernels; needs CUDA or TRITON_INTERPRET=1), cupy (CUDA RawKernels:
feature-intersection attention for TopKFeatures). They depend on the IR only; importing this
package registers them in :data:`REGISTRY`."""

# the triton and cupy backends import their libraries lazily: without them, they register
# and report a reason
from . import cupy, executor, reference, sdpa, triton
from .base import REGISTRY, Backend, register

__all__ = ["REGISTRY", "Backend", "cupy", "executor", "reference", "register", "sdpa", "triton"]
