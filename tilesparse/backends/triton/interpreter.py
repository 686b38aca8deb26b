"""A workaround for Triton 3.6's CPU interpreter, applied only under TRITON_INTERPRET=1.

The interpreter multiplies bf16 operands of ``tl.dot`` as raw bit patterns (results off by
~1e10; triton-lang/triton#11584). The patch converts bf16 operands to fp32 before the product,
which is what tensor cores do (bf16 operands, fp32 accumulation). Other dtypes are untouched.
The kernels do no bf16 arithmetic besides dots and conversions, so this is all they need.
"""

from __future__ import annotations

import numpy as np

__all__ = ["patch_bf16_dot"]

_PATCHED = False


def patch_bf16_dot() -> None:
    """Make the interpreter's dot compute bf16 operands in fp32 (idempotent)."""
    global _PATCHED
    if _PATCHED:
        return
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype == tl.bfloat16 or b.dtype == tl.bfloat16:
            a = interpreter.TensorHandle(_to_f32(a), tl.float32)
            b = interpreter.TensorHandle(_to_f32(b), tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
    _PATCHED = True


def _to_f32(t) -> np.ndarray:
    import triton.language as tl

    if t.dtype != tl.bfloat16:
        return t.data.astype(np.float32)
    # bf16 is the high half of an fp32 bit pattern
    bits = t.data.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32)
