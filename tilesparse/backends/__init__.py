"""Attention backends: reference (the oracle), executor (the kernels' torch model), sdpa (dense
groups), triton (tile-skipping kernels; needs CUDA or TRITON_INTERPRET=1), cupy (CUDA
RawKernels: feature-intersection attention for TopKFeatures); and index builders: torch (the
IR's code), triton and cupy (kernels). They depend on the IR only; importing this package
registers them in :data:`REGISTRY` and :data:`BUILDERS`."""

# the triton and cupy backends import their libraries lazily: without them, they register
# and report a reason
from . import cupy, executor, reference, sdpa, triton
from .base import REGISTRY, Backend, register
from .builder import BUILDERS, HashingBuilder, IndexBuilder, lsh_hasher, register_builder
# given ids' range check and a support's range and repeat check: Triton's where it runs
from .triton import id_check as id_check_for
# the built-in topk_abs criterion in one launch: Triton's on CUDA
from .triton import topk_selector

__all__ = [
    "BUILDERS", "REGISTRY", "Backend", "HashingBuilder", "IndexBuilder", "cupy", "executor", "lsh_hasher",
    "reference", "register", "register_builder", "sdpa", "triton",
]  # fmt: skip
