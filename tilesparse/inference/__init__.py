"""Inference: a KV cache that knows the pattern, decoding and chunked prefill against it."""

from .cache import KVCache, StepReads
from .decode import attend_cached, decode_step, key_slices

__all__ = ["KVCache", "StepReads", "attend_cached", "decode_step", "key_slices"]
