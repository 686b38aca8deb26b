"""Backends: reference (the oracle), executor (the kernels' torch model), sdpa (dense groups),
triton (tile-skipping kernels; needs CUDA or TRITON_INTERPRET=1). They depend on the IR only;
importing this package registers them in :data:`REGISTRY`."""

from . import executor, reference, sdpa
from .base import REGISTRY, Backend, register

try:  # triton is a hard dependency on Linux, but the backend must not break the import
    from . import triton as _triton  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised only where triton is missing
    _TRITON_IMPORT_ERROR = str(e)

__all__ = ["REGISTRY", "Backend", "executor", "reference", "register", "sdpa"]
