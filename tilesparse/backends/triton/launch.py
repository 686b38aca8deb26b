"""A lean launch path for the Triton kernels: compile once through ``kernel[grid](...)``, then
launch the cached compiled kernel directly.

``kernel[grid](...)`` spends 15-60 us of host time per launch before the driver sees it
(binding the arguments, specializing each one, hashing the compile key, reading Triton's
settings), as long as the kernels themselves take at small sizes. :class:`LeanKernel` keys its
own cache by what Triton specializes on (:func:`prepared`):

- the arguments' types;
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
``JITFunction.run`` does after its own cache lookup, but each CUDA tensor as its address
(:func:`prepared`): the launcher then skips its per-tensor driver query. On Triton 3.6 a hit
calls the launcher's C function itself where the kernel takes no scratch memory
(:func:`launch_entry`). A :class:`Site` (one place, one grid, one set of constants) keys its
launches by less: its per-call tensors' dtypes, its :class:`Fixed` block and its scalars.

The normal path stays where the lean one cannot stand in: under ``TRITON_INTERPRET=1`` (the
CPU tests), with Triton's launch hooks set (profilers), on a kernel whose compile-time
parameters do not all come last, and on Triton versions whose internals this was not checked
against (:data:`LEAN_TRITON`); a kernel compiled asynchronously is resolved on its first hit.
Under the interpreter a kernel's first :class:`LeanKernel` also puts the interpreter's exact
speed-ups in place (``interpreter.speed_up_interpreter``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import reduce
from operator import attrgetter, itemgetter, or_
from types import BuiltinFunctionType

import torch
import triton
from torch import Tensor

from ..switch import switched_on
from .versions import installed_triton

__all__ = [
    "LEAN_TRITON", "OPTIONS", "Fixed", "LeanKernel", "Site", "Sites", "arg_key", "cdiv", "direct_head", "expanded",
    "inline_fixed", "interned", "keyed_launches", "kept_args", "launch_entry", "lean", "lean_supported",
    "normal_launches", "prepared", "read",
]

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


def _scalar_key(a) -> object:
    kind = type(a)
    if kind is int:
        return _int_key(a)
    if kind is float:
        return float
    return (a,)  # bool or None: the value


_SCALARS = (int, float, bool, type(None))
_MEMO_MAX = 4096  # scalar tuples remembered per argument layout (sizes change rarely)


def _picker(ix: list[int]) -> Callable[[Sequence], tuple]:
    if not ix:
        return lambda args: ()
    if len(ix) == 1:
        return lambda args, i=ix[0]: (args[i],)
    return itemgetter(*ix)


class Fixed:
    """Tensors handed to many launches whose addresses and dtypes never change while this
    object lives (the index build's views of the buffer it keeps, a kept head map): passed to a
    launch as one argument in their place, their part of the key and their addresses are read
    here once, where every launch would read each tensor's address, dtype and device again
    (a few tenths of a microsecond a tensor). Its owner must keep it no longer than the tensors keep
    their storage (the build's entry holds both)."""

    __slots__ = ("tensors", "key", "addresses")

    def __init__(self, tensors: Sequence[Tensor]):
        self.tensors = tuple(tensors)
        if not all(isinstance(t, Tensor) for t in self.tensors):
            raise TypeError(f"Fixed holds tensors only, got {[type(t).__name__ for t in self.tensors]}")
        key, self.addresses = prepared(self.tensors)
        self.key = interned(key)


def expanded(args: Sequence) -> tuple:
    """``args`` with each :class:`Fixed` replaced by its tensors (Triton's own launch)."""
    if not any(type(a) is Fixed for a in args):
        return tuple(args)
    return tuple(t for a in args for t in (a.tensors if type(a) is Fixed else (a,)))


class _Layout:
    """Where the tensors, the :class:`Fixed` blocks and the scalars sit in an argument list of
    given types, and the keys of the scalar tuples seen in that layout (a launch site passes the
    same sizes and strides call after call: their key is one dictionary lookup)."""

    __slots__ = ("tensor_ix", "tensors", "scalars", "leading", "scalar_keys", "fixed_ix", "fixed", "single")

    def __init__(self, kinds: tuple[type, ...]):
        for k in kinds:
            if not (issubclass(k, Tensor) or k is Fixed or k in _SCALARS):
                raise TypeError(f"lean launch: argument of type {k.__name__} is not a tensor, int, float, bool or None")
        self.tensor_ix = [i for i, k in enumerate(kinds) if issubclass(k, Tensor)]
        self.fixed_ix = [i for i, k in enumerate(kinds) if k is Fixed]
        self.tensors = _picker(self.tensor_ix)
        self.fixed = _picker(self.fixed_ix)
        self.scalars = _picker([i for i, k in enumerate(kinds) if not (issubclass(k, Tensor) or k is Fixed)])
        # tensors (and Fixed blocks) first, then scalars
        self.leading = sorted(self.tensor_ix + self.fixed_ix) == list(range(len(self.tensor_ix) + len(self.fixed_ix)))
        # one block among the leading tensors: how many plain tensors come before it
        single = self.leading and len(self.fixed_ix) == 1
        self.single = sum(1 for t in self.tensor_ix if t < self.fixed_ix[0]) if single else None
        self.scalar_keys: dict[tuple, int] = {}

    def scalar_key(self, scalars: tuple) -> int:
        """The scalars' keys as one :func:`interned` int (hashed at once in every later key)."""
        key = self.scalar_keys.get(scalars)
        if key is None:
            if len(self.scalar_keys) >= _MEMO_MAX:
                self.scalar_keys.clear()
            key = self.scalar_keys[scalars] = interned(tuple(map(_scalar_key, scalars)))
        return key


_INTERNED: dict[tuple, int] = {}


def interned(key: tuple) -> int:
    """One int per distinct ``key`` for the process's life (never reused): a key part that
    hashes as fast as an int and compares equal exactly where the parts do."""
    n = _INTERNED.get(key)
    if n is None:
        n = _INTERNED[key] = len(_INTERNED)
    return n


_LAYOUTS: dict[tuple[type, ...], _Layout] = {}
_data_ptr = Tensor.data_ptr
_dtype = attrgetter("dtype")
_on_cuda = attrgetter("is_cuda")


def arg_key(args: Sequence) -> tuple:
    """What Triton specializes a launch on, per runtime argument (see the module docstring)."""
    return prepared(args)[0]


def prepared(args: Sequence) -> tuple[tuple, tuple]:
    """:func:`arg_key` of ``args``, and ``args`` as a hit hands them to the launcher: each CUDA
    tensor as its address. Triton's launcher takes an int for a pointer as it is, where for a
    tensor it calls ``data_ptr()`` and asks the driver whether the address is device memory
    (``cuPointerGetAttribute``), per tensor and launch; a tensor not on CUDA is passed as
    itself, so that the launcher still checks it.

    The key holds the arguments' types (their :class:`_Layout`, one per tuple of types), the
    tensors' dtypes and 16-byte alignment (one ``True`` when all are aligned) and the scalars'
    keys. Its loops run in C (``map``, ``itemgetter``), and the scalars' keys are remembered
    per argument layout."""
    kinds = tuple(map(type, args))
    layout = _LAYOUTS.get(kinds)
    if layout is None:
        layout = _LAYOUTS[kinds] = _Layout(kinds)
    tensors = layout.tensors(args)
    scalars = layout.scalars(args)
    addresses = tuple(map(_data_ptr, tensors))
    aligned = True if not reduce(or_, addresses, 0) & 15 else tuple(a & 15 == 0 for a in addresses)
    key = (layout, tuple(map(_dtype, tensors)), aligned, layout.scalar_key(scalars))
    if not all(map(_on_cuda, tensors)):
        addresses = tuple(a if t.is_cuda else t for a, t in zip(addresses, tensors, strict=True))
    if layout.fixed_ix:
        return _with_fixed(layout, args, key, addresses, scalars)
    if layout.leading:
        return key, addresses + scalars
    run = list(args)
    for i, a in zip(layout.tensor_ix, addresses, strict=True):
        run[i] = a
    return key, tuple(run)


def _with_fixed(layout: _Layout, args: Sequence, key: tuple, addresses: tuple, scalars: tuple) -> tuple[tuple, tuple]:
    """:func:`prepared`'s result where ``args`` hold :class:`Fixed` blocks: their keys join the
    key, their addresses take their places."""
    if layout.single is not None:  # one block among the leading tensors: the launch sites' case, in two slices
        f = args[layout.fixed_ix[0]]
        cut = layout.single
        return (*key, f.key), addresses[:cut] + f.addresses + addresses[cut:] + scalars
    fixed = layout.fixed(args)
    run = list(args)
    for i, a in zip(layout.tensor_ix, addresses, strict=True):
        run[i] = a
    for i, f in zip(reversed(layout.fixed_ix), reversed(fixed), strict=True):
        run[i : i + 1] = f.addresses
    return (*key, *[f.key for f in fixed]), tuple(run)


def _is_jit_function(fn) -> bool:
    """A compiled-path kernel (not the interpreter's stand-in, which TRITON_INTERPRET=1 makes)."""
    from triton.runtime.jit import JITFunction

    return type(fn) is JITFunction


def _is_interpreted(fn) -> bool:
    """A kernel that TRITON_INTERPRET=1 made the interpreter's stand-in (whose module is then
    loaded: a compiled-path process never imports it for this)."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    return interpreter is not None and isinstance(fn, interpreter.InterpretedFunction)


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


def _current_device() -> Callable[[], int]:
    """The current CUDA device's index: torch's own getter without ``torch.cuda.current_device``'s
    Python wrapper (it initializes CUDA lazily too), read on every lean launch."""
    try:
        from torch._C import _cuda_getDevice

        return _cuda_getDevice
    except ImportError:
        return torch.cuda.current_device


class LeanKernel:
    """One ``@triton.jit`` kernel launched through the lean path where it can be.

    ``kernel[grid](*args, **constants)`` as with Triton: ``args`` the runtime arguments in
    order, ``constants`` every compile-time parameter and launch option by name.
    """

    def __init__(self, fn, *, enabled: bool | None = None):
        self.fn = fn
        self.cache: dict[tuple, tuple] = {}  # key -> (launcher, function, head, constants): launch_entry()
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
        if _is_interpreted(fn):  # TRITON_INTERPRET=1: the interpreter's exact speed-ups (interpreter.py)
            from .interpreter import speed_up_interpreter

            speed_up_interpreter()
        self._stream = _raw_stream()
        self._device = _current_device()

    def __getitem__(self, grid: tuple[int, ...]):
        return lambda *args, **constants: self.launch(grid, args, constants)

    def lean_now(self) -> bool:
        """Whether a launch now takes the lean path: enabled, outside :func:`normal_launches`,
        and no launch hook set (a profiler's hooks see every launch through Triton's own)."""
        if not self.enabled or _NORMAL[0]:
            return False
        runtime = triton.knobs.runtime
        return not (_listening(runtime.launch_enter_hook) or _listening(runtime.launch_exit_hook))

    def _normal(self, grid: tuple[int, ...], args: tuple, constants: dict):
        """Triton's own ``kernel[grid]`` launch (compiling on a miss), with :data:`OPTIONS`."""
        return self.fn[grid](*expanded(args), **constants, **OPTIONS)

    def launch(self, grid: tuple[int, ...], args: tuple, constants: dict) -> tuple | None:
        """Launch; the cache entry a later launch with this key takes (None: launched through
        Triton's own path, :meth:`lean_now` being false)."""
        if not self.lean_now():
            self._normal(grid, args, constants)
            return None
        device = self._device()
        args_key, run_args = prepared(args)
        key = (device, tuple(constants.items()), args_key)
        hit = self.cache.get(key)
        if hit is None:
            if len(run_args) != self.n_runtime:  # checked here only: a hit's key holds the arity
                raise TypeError(f"{self.fn.__name__} takes {self.n_runtime} runtime arguments, got {len(run_args)}")
            self.misses += 1
            compiled = self._normal(grid, args, constants)
            if hasattr(compiled, "result"):
                compiled = compiled.result()
            # what a hit hands the launcher besides the grid, the stream and the arguments: the
            # constants after them come from the key's constants (and the defaults)
            tail = tuple(constants[n] if n in constants else self.defaults[n] for n in self.const_names)
            hit = self.cache[key] = launch_entry(compiled, tail)
            return hit
        self.hits += 1
        go, function, head, tail = hit
        g0 = grid[0]
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        go(g0, g1, g2, self._stream(device), function, *head, *run_args, *tail)
        return hit


def launch_entry(compiled, tail: tuple) -> tuple:
    """What a hit calls for a compiled kernel, as ``(go, function, head, tail)``: it calls
    ``go(g0, g1, g2, stream, function, *head, *runtime_args, *tail)``, ``tail`` the
    compile-time constants in parameter order.

    ``go`` is the compiled kernel's launcher (``compiled.run``: head = the packed metadata, no
    launch metadata, no hooks), or on Triton 3.6 the C function it calls (:func:`direct_head`),
    which skips the launcher's Python wrapper (0.7-0.9 µs a launch) where the kernel takes no
    scratch memory."""
    run, metadata = compiled.run, compiled.packed_metadata
    head = direct_head(run, metadata)
    if head is not None and isinstance(run.launch, BuiltinFunctionType):
        return run.launch, compiled.function, head, tail
    return run, compiled.function, (metadata, None, None, None), tail


def direct_head(run, metadata) -> tuple | None:
    """The arguments Triton 3.6's launcher (``CudaLauncher.__call__``) passes its C function
    ``run.launch`` between the function handle and the runtime arguments, for a launch without
    launch metadata or hooks: cooperative grid, programmatic dependent launch, the global and
    the profile scratch (None: the kernel takes none), then the metadata, the launch metadata
    and the two hooks. None where the call is not that one: another Triton (3.7 on pass the
    arguments as one tuple), a launcher of another class, or a kernel that takes scratch
    memory (the launcher allocates it per launch). ``tests/backends/triton/test_lean_launch.py``
    holds it to 3.6's own launcher."""
    if (
        installed_triton() != (3, 6)
        or type(run).__name__ != "CudaLauncher"
        or getattr(run, "global_scratch_size", 1) > 0
        or getattr(run, "profile_scratch_size", 1) > 0
    ):
        return None
    return (run.launch_cooperative_grid, run.launch_pdl, None, None, metadata, None, None, None)


def read(tensors: tuple) -> tuple[tuple, tuple] | None:
    """What a :class:`Site` reads of its per-call tensors, once for the launches that share
    them (a launch pair): their dtypes and addresses; None where one is not on CUDA or not
    16-byte aligned (the site's general path then takes them, which keys them as Triton does)."""
    addresses = tuple(map(_data_ptr, tensors))
    if reduce(or_, addresses, 0) & 15 or not all(map(_on_cuda, tensors)):
        return None
    return tuple(map(_dtype, tensors)), addresses


_SITE_ENTRIES = 64  # entries a site keeps (strides and blocks change rarely)
_KEYED = [False]  # keyed_launches() in force


def keyed_launches():
    """Inside the block every :class:`Site` launch takes its kernel's general launch, which
    keys every argument, as before sites (A/B timing: ``call_times.py --ab sites``)."""
    return switched_on(_KEYED)


class Site:
    """One kernel launched from one place with one grid and one set of compile-time
    constants, its runtime arguments laid out as: tensors read per call, then ``rest`` (one
    :class:`Fixed` block or nothing), then scalars.

    :class:`LeanKernel` keys a launch by what Triton specializes on, read from every argument
    (:func:`prepared`, about 3-5 µs a launch on a fast host). A site knows more: its constants,
    its grid and the types of its scalars do not change from call to call, so its key is the
    current device, the tensors' dtypes, the block's key and the scalars themselves (finer
    than Triton's: each value is its own entry), and the tensors' 16-byte alignment is
    checked, not keyed: a call with an unaligned or non-CUDA tensor, a ``rest`` that is not
    one block (:func:`inline_fixed`), a tensor among the scalars but the last, the lean path
    off (:meth:`LeanKernel.lean_now`) or :func:`keyed_launches` takes the kernel's general
    launch, which keys every argument. A miss launches through the kernel too and keeps the
    entry it used. The last scalar may be a tensor (the forward's poison, passed on calls whose
    given ids are checked, None on others): keyed by its dtype and passed as its address, its
    alignment and device checked as the tensors'.

    The scalars must keep their types position by position (ints stay ints, bools bools: an
    int 1 and True are one key): a miss checks them against the first miss's and raises.
    ``varying``: a scalar changes from call to call (a position); the scalars are keyed by what
    Triton specializes them on (:func:`_scalar_key`: an int by whether it is 1, its divisibility
    by 16 and its range), not by value."""

    __slots__ = ("kernel", "grid", "constants", "entries", "types", "varying")

    def __init__(self, kernel: LeanKernel, grid: tuple[int, ...], constants: dict, *, varying: bool = False):
        self.kernel = kernel
        self.grid = (*grid, *(1,) * (3 - len(grid)))
        self.constants = dict(constants)
        self.entries: dict[tuple, tuple] = {}
        self.types: tuple | None = None
        self.varying = varying

    def __call__(self, tensors: tuple, rest: tuple, scalars: tuple, reading: tuple | None = None) -> tuple | None:
        """Launch with runtime arguments ``(*tensors, *rest, *scalars)``; ``reading``: :func:`read`
        of ``tensors`` where the caller has it. Returns the reading it used (None: the general
        launch took them), for the next launch of the same tensors (a launch pair's second)."""
        kernel = self.kernel
        if rest:
            block = rest[0]
            if len(rest) != 1 or type(block) is not Fixed:
                self._general(tensors, rest, scalars)
                return None
            block_key, block_addresses = block.key, block.addresses
        else:
            block_key, block_addresses = -1, ()
        if _KEYED[0] or not kernel.lean_now():
            self._general(tensors, rest, scalars)
            return None
        if reading is None:
            reading = read(tensors)
            if reading is None:
                self._general(tensors, rest, scalars)
                return None
        dtypes, addresses = reading
        device = kernel._device()
        run = keyed = scalars
        if scalars and isinstance(scalars[-1], Tensor):  # a poison, the last scalar: passed as its address
            poison = scalars[-1]
            address = poison.data_ptr()
            if address & 15 or not poison.is_cuda:
                self._general(tensors, rest, scalars)
                return reading
            run = (*scalars[:-1], address)
            keyed = (*scalars[:-1], poison.dtype)
        key = (device, dtypes, block_key, tuple(map(_scalar_key, keyed)) if self.varying else keyed)
        hit = self.entries.get(key)
        if hit is None:
            self._miss(key, tensors, rest, scalars)
            return reading
        kernel.hits += 1
        go, function, head, tail = hit
        g0, g1, g2 = self.grid
        go(g0, g1, g2, kernel._stream(device), function, *head, *addresses, *block_addresses, *run, *tail)
        return reading

    def _general(self, tensors: tuple, rest: tuple, scalars: tuple) -> None:
        """The kernel's general launch of these arguments, which keys every one; returns None
        (no reading: :meth:`__call__`'s result)."""
        self.kernel.launch(self.grid, (*tensors, *rest, *scalars), self.constants)

    def _miss(self, key: tuple, tensors: tuple, rest: tuple, scalars: tuple) -> None:
        entry = self.kernel.launch(self.grid, (*tensors, *rest, *scalars), self.constants)
        if any(isinstance(s, Tensor) for s in scalars[:-1]):
            return  # a tensor among the scalars but the last: launched, not kept
        # a poison (the last scalar) or None in its place: one type, an optional pointer
        types = tuple(Tensor if s is None or isinstance(s, Tensor) else type(s) for s in scalars)
        if self.types is None:
            self.types = types
        elif types != self.types:
            names = [t.__name__ for t in types]
            raise TypeError(f"{self.kernel.fn.__name__}: a launch site's scalars changed types to {names}, "
                            f"from {[t.__name__ for t in self.types]}")  # fmt: skip
        if entry is not None:
            if len(self.entries) >= _SITE_ENTRIES:
                self.entries.clear()
            self.entries[key] = entry


class Sites:
    """The :class:`Site` of a kernel per key, made on first use: for a launch whose grid and
    constants follow from sizes a free function works out per call (the key), at most
    :data:`_SITES_KEPT` of them kept."""

    __slots__ = ("fn", "sites")

    def __init__(self, fn):
        self.fn = fn
        self.sites: dict = {}

    def get(
        self, key, grid_and_constants: Callable[[], tuple[tuple[int, ...], dict]], *, varying: bool = False
    ) -> Site:
        """The site for ``key``; ``grid_and_constants()`` gives its grid and constants when new
        (``varying``: :class:`Site`'s)."""
        site = self.sites.get(key)
        if site is None:
            if len(self.sites) >= _SITES_KEPT:
                self.sites.clear()
            site = self.sites[key] = Site(lean(self.fn), *grid_and_constants(), varying=varying)
        return site


_SITES_KEPT = 64  # a model's few signatures
_INLINE = [False]  # inline_fixed() in force


def inline_fixed():
    """Inside the block the launch sites pass their tensors one by one, as before :class:`Fixed`
    (A/B timing: ``call_times.py --ab fixed-args``)."""
    return switched_on(_INLINE)


def kept_args(kept: dict | None, key, tensors: Callable[[], tuple]) -> tuple:
    """Launch arguments for the tensors ``tensors()`` gives: one :class:`Fixed` of them kept in
    ``kept`` under ``key`` (made on the first call), or the tensors themselves where nothing
    keeps them (``kept`` None) or inside :func:`inline_fixed`."""
    if kept is None or _INLINE[0]:
        return tensors()
    block = kept.get(key)
    if block is None:
        block = kept[key] = Fixed(tensors())
    return (block,)


def normal_launches():
    """Launch every kernel through ``kernel[grid]`` inside the block (tests, benchmarks)."""
    return switched_on(_NORMAL)


_LEAN: dict[int, LeanKernel] = {}


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for a launch grid worked out per call: ``triton.cdiv`` is a
    ``ConstexprFunction`` there, about a hundred times slower on the host."""
    return -(-a // b)


def lean(fn) -> LeanKernel:
    """The process-wide :class:`LeanKernel` of ``fn`` (one cache per kernel)."""
    k = _LEAN.get(id(fn))
    if k is None or k.fn is not fn:
        k = _LEAN[id(fn)] = LeanKernel(fn)
    return k
