"""A lean launch path for the Triton kernels: compile once through ``kernel[grid](...)``, then
launch the cached compiled kernel directly.

``kernel[grid](...)`` spends 15-60 us of host time per launch before the driver sees it
(binding the arguments, specializing each one, hashing the compile key, reading Triton's
settings), as long as the kernels themselves take at small sizes. :class:`LeanKernel` keys its
own cache by what Triton specializes on, computed in one pass over the arguments:

- per tensor: its dtype and whether its address is 16-byte aligned;
- per int: whether it is 1, whether it is a multiple of 16, and its range (int32, int64,
  uint64): Triton turns a 1 into a constant, marks multiples of 16 and types by range;
- per float: its type; per bool or None: the value;
- the compile-time constants and launch options (``num_warps``, ``num_stages``), and the
  current device.

That key is at least as fine as Triton's own (two launches with one key have one Triton key),
so the kernel a miss compiled through the normal path is the one a hit launches. Triton's
process-wide compile settings (``triton.knobs``: debug, instrumentation) are not in it: they
count when a kernel compiles, so set them before the first call. A hit calls
the compiled kernel's launcher with the arguments in the kernel's order, as
``JITFunction.run`` does after its own cache lookup.

The normal path stays where the lean one cannot stand in: under ``TRITON_INTERPRET=1`` (the
CPU tests), with Triton's launch hooks set (profilers), on a kernel whose compile-time
parameters do not all come last, and on Triton versions whose internals this was not checked
against (:data:`LEAN_TRITON`); a kernel compiled asynchronously is resolved on its first hit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import triton
from torch import Tensor

from .versions import installed_triton

__all__ = ["LEAN_TRITON", "OPTIONS", "LeanKernel", "arg_key", "lean", "lean_supported", "normal_launches"]

# (major, minor) of the Triton releases whose JITFunction.run / CompiledKernel.run this path
# mirrors: on each, tests/backends/triton/test_lean_launch.py checks that a lean launch hands the
# launcher what Triton's own launch does and that the key is as fine as Triton's (run against
# 3.6.0, 3.7.1, 3.8.0 and 3.9.0); tests/gpu/test_lean_launch_gpu.py checks the results bitwise
# on the GPU machine's release (3.6)
LEAN_TRITON: frozenset[tuple[int, int]] = frozenset({(3, 6), (3, 7), (3, 8), (3, 9)})

# compile options every launch passes: FMA contraction on, as the kernels were tuned and checked
# with (Triton's default through 3.9, which warns when it is left unset; 3.10 turns it off)
OPTIONS = {"enable_fp_fusion": True}

_I32 = (-(2**31), 2**31 - 1)
_NORMAL = [False]  # normal_launches() in force
_I64_MAX = 2**63 - 1


def lean_supported(version: tuple[int, int] | None = None) -> bool:
    """Whether this Triton's launch internals are the ones the lean path was checked against."""
    return (version or installed_triton()) in LEAN_TRITON


def _int_key(a: int) -> int:
    if a == 1:
        return 1
    key = 2 if a % 16 == 0 else 0
    if _I32[0] <= a <= _I32[1]:
        return key
    return key + (4 if a <= _I64_MAX else 8)


def arg_key(args: Sequence) -> tuple:
    """What Triton specializes a launch on, per runtime argument (see the module docstring).
    Ints first: most arguments are strides and sizes."""
    out = []
    for a in args:
        kind = type(a)
        if kind is int:
            out.append(_int_key(a))
        elif isinstance(a, Tensor):
            out.append(a.dtype)
            out.append(a.data_ptr() % 16 == 0)
        elif kind is float:
            out.append(float)
        elif a is None or kind is bool:
            out.append((a,))
        else:
            raise TypeError(f"lean launch: argument of type {kind.__name__} is not a tensor, int, float, bool or None")
    return tuple(out)


def _is_jit_function(fn) -> bool:
    """A compiled-path kernel (not the interpreter's stand-in, which TRITON_INTERPRET=1 makes)."""
    from triton.runtime.jit import JITFunction

    return type(fn) is JITFunction


def _listening(hook) -> bool:
    """Whether a launch hook is set: Triton 3.6 keeps an empty ``HookChain`` when none is."""
    return hook is not None and bool(getattr(hook, "calls", True))


def _raw_stream() -> Callable[[int], int]:
    """The current stream's handle by device index, as Triton's driver reads it."""
    try:
        from torch._C import _cuda_getCurrentRawStream

        return _cuda_getCurrentRawStream
    except ImportError:
        return lambda device: torch.cuda.current_stream(device).cuda_stream


class LeanKernel:
    """One ``@triton.jit`` kernel launched through the lean path where it can be.

    ``kernel[grid](*args, **constants)`` as with Triton: ``args`` the runtime arguments in
    order, ``constants`` every compile-time parameter and launch option by name.
    """

    def __init__(self, fn, *, enabled: bool | None = None):
        self.fn = fn
        self.cache: dict[tuple, object] = {}
        self.hits = 0
        self.misses = 0
        names = list(getattr(fn, "arg_names", ()))
        const_ix = sorted(getattr(fn, "constexprs", ()))
        n_runtime = len(names) - len(const_ix)
        # compile-time parameters after every runtime one: the launcher's arguments are then
        # the runtime arguments followed by the constants in parameter order
        self.trailing = const_ix == list(range(n_runtime, len(names)))
        self.n_runtime = n_runtime
        self.const_names = tuple(names[i] for i in const_ix)
        params = getattr(fn, "params", [])
        self.defaults = {p.name: p.default for p in params if p.is_constexpr and p.has_default}
        if enabled is None:
            enabled = self.trailing and _is_jit_function(fn) and lean_supported()
        self.enabled = enabled
        self._stream = _raw_stream()
        self._device = torch.cuda.current_device

    def __getitem__(self, grid: tuple[int, ...]):
        return lambda *args, **constants: self.launch(grid, args, constants)

    def keyed(self, args: tuple) -> tuple | None:
        """``arg_key(args)`` where a launch would compute it: launches of one argument list
        with other constants (a launch pair) share it."""
        return arg_key(args) if self.enabled and not _NORMAL[0] else None

    def _normal(self, grid: tuple[int, ...], args: tuple, constants: dict):
        """Triton's own ``kernel[grid]`` launch (compiling on a miss), with :data:`OPTIONS`."""
        return self.fn[grid](*args, **constants, **OPTIONS)

    def launch(self, grid: tuple[int, ...], args: tuple, constants: dict, args_key: tuple | None = None) -> None:
        if not self.enabled or _NORMAL[0]:
            self._normal(grid, args, constants)
            return
        runtime = triton.knobs.runtime
        if _listening(runtime.launch_enter_hook) or _listening(runtime.launch_exit_hook):
            self._normal(grid, args, constants)  # a profiler listens: its hooks see every launch
            return
        device = self._device()
        key = (device, tuple(constants.items()), arg_key(args) if args_key is None else args_key)
        compiled = self.cache.get(key)
        if compiled is None:
            self.misses += 1
            compiled = self._normal(grid, args, constants)
            if hasattr(compiled, "result"):
                compiled = compiled.result()
            self.cache[key] = compiled
            return
        self.hits += 1
        if len(args) != self.n_runtime:
            raise TypeError(f"{self.fn.__name__} takes {self.n_runtime} runtime arguments, got {len(args)}")
        tail = tuple(constants[n] if n in constants else self.defaults[n] for n in self.const_names)
        g0 = grid[0]
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        stream = self._stream(device)
        compiled.run(g0, g1, g2, stream, compiled.function, compiled.packed_metadata, None, None, None, *args, *tail)


@contextlib.contextmanager
def normal_launches():
    """Launch every kernel through ``kernel[grid]`` inside the block (tests, benchmarks)."""
    old = _NORMAL[0]
    _NORMAL[0] = True
    try:
        yield
    finally:
        _NORMAL[0] = old


_LEAN: dict[int, LeanKernel] = {}


def lean(fn) -> LeanKernel:
    """The process-wide :class:`LeanKernel` of ``fn`` (one cache per kernel)."""
    k = _LEAN.get(id(fn))
    if k is None or k.fn is not fn:
        k = _LEAN[id(fn)] = LeanKernel(fn)
    return k
