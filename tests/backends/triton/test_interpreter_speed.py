"""The interpreter's speed-ups (``interpreter.speed_up_interpreter``) return what the interpreter's
own internals return, on the installed Triton: the dtype table for every dtype, the numpy xor
reduction for every integer type, axis and keep_dims (through a kernel's ``tl.xor_sum``, and
``tl.sort``, which runs on it), and a launch that calls helpers leaves the language modules as
the interpreter's own patching leaves them, patching them once a launch instead of once a call.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from hypothesis import given, settings
from hypothesis import strategies as st
from triton.runtime import interpreter as tri

from tilesparse.backends.triton import interpreter
from tilesparse.backends.triton.launch import lean
from tilesparse.backends.triton.versions import installed_triton

pytestmark = pytest.mark.skipif(
    installed_triton() not in interpreter.FAST_INTERPRETER_TRITON,
    reason="the speed-ups are off on this Triton (test_they_are_on_exactly_on_the_listed_releases covers it)",
)


@triton.jit
def _xor_rows(X, OUT, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr):
    x = tl.load(X + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    y = tl.xor_sum(x, AXIS, KEEP)
    if AXIS == 0:
        if KEEP:
            tl.store(OUT + tl.arange(0, C)[None, :], y)
        else:
            tl.store(OUT + tl.arange(0, C), y)
    else:
        if KEEP:
            tl.store(OUT + tl.arange(0, R)[:, None], y)
        else:
            tl.store(OUT + tl.arange(0, R), y)


@triton.jit
def _sort_row(X, OUT, N: tl.constexpr):
    tl.store(OUT + tl.arange(0, N), tl.sort(tl.load(X + tl.arange(0, N))))


@contextlib.contextmanager
def _interpreter_own():
    """The interpreter's own internals inside the block, the speed-ups again after it."""
    interpreter.speed_up_interpreter()
    fast = (tri._get_np_dtype, tri.ReduceOps.apply_impl, tri.InterpretedFunction.__call__, tri._patch_lang)
    tri._get_np_dtype = interpreter.interpreter_original("_get_np_dtype")
    tri.ReduceOps.apply_impl = interpreter.interpreter_original("apply_impl")
    tri.InterpretedFunction.__call__ = interpreter.interpreter_original("__call__")
    tri._patch_lang = interpreter.interpreter_original("_patch_lang")
    try:
        yield
    finally:
        tri._get_np_dtype, tri.ReduceOps.apply_impl, tri.InterpretedFunction.__call__, tri._patch_lang = fast


def test_they_are_on_exactly_on_the_listed_releases():
    assert interpreter.speed_up_interpreter() == (installed_triton() in interpreter.FAST_INTERPRETER_TRITON)


def test_a_kernels_first_lean_launcher_puts_them_in_place():
    lean(_sort_row)
    assert tri._get_np_dtype is not interpreter.interpreter_original("_get_np_dtype")
    assert tri.ReduceOps.apply_impl is not interpreter.interpreter_original("apply_impl")
    assert tri._patch_lang is not interpreter.interpreter_original("_patch_lang")
    assert tri.InterpretedFunction.__call__ is not interpreter.interpreter_original("__call__")


def test_the_dtype_table_answers_as_the_interpreter():
    interpreter.speed_up_interpreter()
    own = interpreter.interpreter_original("_get_np_dtype")
    scalars = [v for v in vars(tl).values() if isinstance(v, tl.dtype) and not isinstance(v, (tl.pointer_type, tl.block_type))]
    assert len(scalars) >= 18
    types = scalars + [tl.pointer_type(t) for t in scalars] + [tl.block_type(t, [4, 8]) for t in scalars]
    types.append(tl.block_type(tl.pointer_type(tl.float32), [16]))
    for t in types:
        try:
            want = own(t)
        except KeyError:
            with pytest.raises(KeyError):
                tri._get_np_dtype(t)
            continue
        assert tri._get_np_dtype(t) == want, t


@settings(max_examples=25, deadline=None)
@given(
    dtype=st.sampled_from((torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)),
    rows=st.sampled_from((1, 2, 8)),
    cols=st.sampled_from((1, 4, 16)),
    axis=st.sampled_from((0, 1)),
    keep=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_xor_reduction_equals_the_interpreters_own(dtype, rows, cols, axis, keep, seed):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(info.min, info.max, (rows, cols), dtype=dtype, generator=g)
    outs = []
    for own in (True, False):
        out = torch.empty(cols if axis == 0 else rows, dtype=dtype)
        with _interpreter_own() if own else contextlib.nullcontext():
            _xor_rows[(1,)](x, out, rows, cols, axis, keep)
        outs.append(out)
    want = np.bitwise_xor.reduce(x.numpy(), axis=axis)
    assert np.array_equal(outs[0].numpy(), want)
    assert torch.equal(outs[0], outs[1])


def test_a_sort_patches_the_language_once_and_leaves_it_as_the_interpreter_does():
    interpreter.speed_up_interpreter()
    own = interpreter.interpreter_original("_patch_lang")
    calls = []

    def counted(fn):  # the interpreter's own patching, counted
        calls.append(fn)
        return own(fn)

    x = torch.randint(-1000, 1000, (64,), dtype=torch.int32, generator=torch.Generator().manual_seed(1))
    results, counts, states = [], [], []
    for fast in (False, True, True):  # twice: after a launch, as before it
        out = torch.empty_like(x)
        calls.clear()
        with _interpreter_own():
            tri._patch_lang = counted
            if fast:  # the speed-up over the counting _patch_lang
                tri.InterpretedFunction.__call__, tri._patch_lang = interpreter._patch_once(tri, tl)
            _sort_row[(1,)](x, out, 64)
        results.append(out)
        counts.append(len(calls))
        states.append({name: getattr(tl, name) for name in dir(tl) if not name.startswith("_")})
    assert all(torch.equal(r, torch.sort(x).values) for r in results)
    assert counts[0] > 20, counts  # the interpreter's own: once a helper call
    assert all(c <= 2 for c in counts[1:]), counts  # once for the launch, once for the helpers' module
    assert states[1] == states[2] == states[0], "the language after a launch is what the interpreter leaves"
