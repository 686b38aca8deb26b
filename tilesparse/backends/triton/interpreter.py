"""A workaround for Triton's CPU interpreter, applied only under TRITON_INTERPRET=1 and only on
the Triton releases that need it (:data:`.versions.INTERPRETER_BF16_DOT`).

The interpreter multiplies bf16 operands of ``tl.dot`` as raw bit patterns (results off by
~1e10; triton-lang/triton#11584). The patch converts bf16 operands to fp32 before the product,
which is what tensor cores do (bf16 operands, fp32 accumulation). Other dtypes are untouched.
The kernels do no bf16 arithmetic besides dots and conversions, so this is all they need.
``tests/backends/triton/test_triton_interpreter.py`` checks that the installed Triton's own dot
is broken exactly when :func:`needs_bf16_dot_patch` says so: a Triton that fixes it fails that
test until it is recorded as fixed in ``versions.py``.
"""

from __future__ import annotations

import numpy as np

from .versions import INTERPRETER_BF16_DOT

__all__ = ["needs_bf16_dot_patch", "patch_bf16_dot", "unpatched_create_dot"]

_ORIGINAL = None  # the interpreter's own create_dot, once patched


def needs_bf16_dot_patch(version: str | None = None) -> bool:
    """Whether Triton ``version`` (default: installed) needs the bf16 dot patch."""
    return INTERPRETER_BF16_DOT.affects(version)


def patch_bf16_dot() -> None:
    """Make the interpreter's dot compute bf16 operands in fp32 where this Triton needs it
    (idempotent)."""
    global _ORIGINAL
    if _ORIGINAL is not None or not needs_bf16_dot_patch():
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
    _ORIGINAL = original


def unpatched_create_dot():
    """The interpreter's own ``create_dot`` (for the test that the patch is still needed)."""
    from triton.runtime import interpreter

    return _ORIGINAL or interpreter.InterpreterBuilder.create_dot


def _to_f32(t) -> np.ndarray:
    import triton.language as tl

    if t.dtype != tl.bfloat16:
        return t.data.astype(np.float32)
    # bf16 is the high half of an fp32 bit pattern
    bits = t.data.view(np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32)
