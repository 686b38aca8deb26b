"""tilesparse: a compiler for exact dynamic sparse attention.

Declare a pattern as a spec, ``compile`` it, call it like F.scaled_dot_product_attention::

    import tilesparse as ts
    attn = ts.compile(ts.Hash(buckets=16), causal=True)
    out = attn(q, k, v)
"""

from . import backends as _backends  # noqa: F401  (registers the backends)
from .api import CompiledAttention, compile
from .inference import KVCache
from .module import SparseAttention
from .patterns import (
    Decisions,
    Dense,
    Hash,
    Hybrid,
    PerHead,
    QKDrop,
    Spec,
    TopKFeatures,
    criterion,
    parse_spec,
    registered,
)
from .patterns.decision_errors import check_errors
from .planner import NoBackendError

__all__ = [
    "CompiledAttention",
    "Decisions",
    "Dense",
    "Hash",
    "Hybrid",
    "KVCache",
    "NoBackendError",
    "PerHead",
    "QKDrop",
    "SparseAttention",
    "Spec",
    "TopKFeatures",
    "check_errors",
    "compile",
    "criterion",
    "parse_spec",
    "registered",
]
__version__ = "0.1.0"
