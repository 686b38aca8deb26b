"""Triton's CPU interpreter made right and faster, under TRITON_INTERPRET=1 only.

The bf16 dot fix applies only on the Triton releases that need it
(:data:`.versions.INTERPRETER_BF16_DOT`).

The interpreter multiplies bf16 operands of ``tl.dot`` as raw bit patterns (results off by
~1e10; triton-lang/triton#11584). The patch converts bf16 operands to fp32 before the product,
which is what tensor cores do (bf16 operands, fp32 accumulation). Other dtypes are untouched.
The kernels do no bf16 arithmetic besides dots and conversions, so this is all they need.
``tests/backends/triton/test_triton_interpreter.py`` checks that the installed Triton's own dot
is broken exactly when :func:`needs_bf16_dot_patch` says so: a Triton that fixes it fails that
test until it is recorded as fixed in ``versions.py``.

:func:`speed_up_interpreter` makes the interpreter itself faster, exactly: three of its internals
took about 60% of an interpreted index build and attention call (cProfile of
``test_noncontiguous_inputs``: 79 s, 32 s with them), and each is replaced by one that returns
the same values:

- ``_get_np_dtype`` built its 18-entry dtype table on every call (285,000 calls): the table is
  made once, from the function itself, and any dtype outside it still goes to the function;
- an integer ``xor_sum`` (the compare-and-swap steps of ``tl.sort``, which the index builder
  runs) fell to the interpreter's generic reduction, a Python loop over every element that calls
  the combine function per element (42 ms a call): it is ``numpy.bitwise_xor.reduce``;
- every call of a ``@triton.jit`` helper inside a launch re-patched the language modules
  (``inspect.getmembers`` over ``triton.language``, its tensor and math; 33,000 times): a
  helper call whose language modules are all patched already skips it.

``tests/backends/triton/test_interpreter_speed.py`` checks each replacement against the
interpreter's own on the installed Triton (run with 3.6.0 and 3.7.1); they apply only on the
releases whose internals they were read against (:data:`FAST_INTERPRETER_TRITON`).
"""

from __future__ import annotations

import numpy as np

from .versions import INTERPRETER_BF16_DOT, installed_triton

__all__ = [
    "FAST_INTERPRETER_TRITON",
    "interpreter_original",
    "needs_bf16_dot_patch",
    "patch_bf16_dot",
    "speed_up_interpreter",
    "unpatched_create_dot",
]

_ORIGINAL = None  # the interpreter's own create_dot, once patched

# (major, minor) of the Triton releases whose interpreter internals speed_up_interpreter replaces
# (_get_np_dtype, ReduceOps.apply_impl, InterpretedFunction.__call__, _patch_lang: read in 3.6.0,
# 3.7.1, 3.8.0 and 3.9.0, where they are the same); elsewhere the interpreter runs as it is
FAST_INTERPRETER_TRITON: frozenset[tuple[int, int]] = frozenset({(3, 6), (3, 7), (3, 8), (3, 9)})
_SPED_UP: dict = {}  # the interpreter's own functions, once replaced (name -> original)


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


def speed_up_interpreter() -> bool:
    """Replace three slow internals of Triton's interpreter by exact faster ones (see the module
    docstring); idempotent. Returns whether they are in place (False on a Triton release outside
    :data:`FAST_INTERPRETER_TRITON`, where nothing changes)."""
    if _SPED_UP:
        return True
    if installed_triton() not in FAST_INTERPRETER_TRITON:
        return False
    import triton.language as tl
    from triton.runtime import interpreter

    _SPED_UP["_get_np_dtype"] = interpreter._get_np_dtype
    _SPED_UP["apply_impl"] = interpreter.ReduceOps.apply_impl
    _SPED_UP["__call__"] = interpreter.InterpretedFunction.__call__
    _SPED_UP["_patch_lang"] = interpreter._patch_lang
    interpreter._get_np_dtype = _np_dtype_lookup(interpreter._get_np_dtype, tl)
    interpreter.ReduceOps.apply_impl = _numpy_xor_reduce(interpreter.ReduceOps.apply_impl, tl)
    interpreter.InterpretedFunction.__call__, interpreter._patch_lang = _patch_once(interpreter, tl)
    return True


def interpreter_original(name: str):
    """The interpreter's own ``_get_np_dtype``, ``apply_impl`` (of ``ReduceOps``), ``__call__``
    (of ``InterpretedFunction``) or ``_patch_lang``, replaced or not (for the tests that compare
    them)."""
    from triton.runtime import interpreter

    if name in _SPED_UP:
        return _SPED_UP[name]
    owner = {"apply_impl": interpreter.ReduceOps, "__call__": interpreter.InterpretedFunction}.get(name, interpreter)
    return getattr(owner, name)


def _np_dtype_lookup(original, tl):
    """``_get_np_dtype`` with its table made once: for each scalar dtype of ``triton.language``
    that ``original`` maps, the same numpy dtype; a block type as its element type (a pointer
    element, or a pointer, as uint64, as ``original`` does); anything else to ``original``."""
    table = {}
    for value in vars(tl).values():
        if isinstance(value, tl.dtype) and not isinstance(value, (tl.pointer_type, tl.block_type)):
            try:
                table[value] = original(value)
            except KeyError:
                pass  # a dtype the interpreter has no array type for: original raises, as before
    pointer = np.dtype(np.uint64)

    def get_np_dtype(tt_dtype):
        if isinstance(tt_dtype, tl.pointer_type):
            return pointer
        if isinstance(tt_dtype, tl.block_type):
            tt_dtype = tt_dtype.element_ty
            if isinstance(tt_dtype, tl.pointer_type):
                return pointer
        found = table.get(tt_dtype)
        return found if found is not None else original(tt_dtype)

    return get_np_dtype


def _numpy_xor_reduce(original, tl):
    """``ReduceOps.apply_impl`` with a one-tensor xor reduction along an axis done by numpy
    (the generic reduction's result: the input's array type, the axis kept as a length-1 one
    with ``keep_dims``); every other reduction goes to ``original``."""
    xor = tl.standard._xor_combine

    def apply_impl(self, input):
        if self.combine_fn is xor and self.axis is not None and len(input) == 1:
            x = input[0]
            return self.to_tensor(np.bitwise_xor.reduce(x.handle.data, axis=self.axis, keepdims=self.keep_dims), x.dtype)
        return original(self, input)

    return apply_impl


def _patch_once(interpreter, tl) -> tuple:
    """``InterpretedFunction.__call__`` (a ``@triton.jit`` helper called inside a running launch)
    and ``_patch_lang`` that together skip the helper's re-patching of the language when every
    language module in its globals is already patched: the interpreter's call patches them again
    on every call, with the same replacements, and never restores them. Whether a module is
    patched is read off it (its ``load`` is no longer Triton's builtin), so that the modules a
    launch restores when it ends count as unpatched after it. A launch's own patching (its
    ``GridExecutor``, which restores) is never skipped."""
    call, patch_lang = interpreter.InterpretedFunction.__call__, interpreter._patch_lang
    skip_next = [False]  # set by a helper call, taken by the _patch_lang call it starts with
    # (function, size of its globals) -> the language modules in its globals: the interpreter's
    # rewrite of a function adds its own globals (triton.language among them) to the module's
    langs: dict = {}

    def patched(module) -> bool:
        return not tl.core.is_builtin(getattr(module, "load", None))

    def helper_call(self, *args, **kwargs):
        key = (self.fn, len(self.fn.__globals__))
        mods = langs.get(key)
        if mods is None:
            mods = langs[key] = [v for v in self.fn.__globals__.values() if v is tl or v is tl.core]
        skip_next[0] = bool(mods) and all(map(patched, mods))
        try:
            return call(self, *args, **kwargs)
        finally:
            skip_next[0] = False

    def patch_lang_unless_patched(fn):
        if skip_next[0]:
            skip_next[0] = False
            return interpreter._LangPatchScope()
        return patch_lang(fn)

    return helper_call, patch_lang_unless_patched
