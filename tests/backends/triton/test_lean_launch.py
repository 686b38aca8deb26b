"""The lean launch path's cache key and fallbacks, on the CPU with a stand-in kernel, and what
it hands the installed Triton's launcher against Triton's own launch (lean_launch_probe.py).

The GPU test (tests/gpu/test_lean_launch_gpu.py) checks the launches themselves give bitwise
the normal path's results.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

triton = pytest.importorskip("triton")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tilesparse.backends.triton.launch import (  # noqa: E402
    LEAN_TRITON, OPTIONS, Fixed, LeanKernel, arg_key, direct_head, expanded, interned, lean, lean_supported, prepared,
)
from tilesparse.backends.triton.versions import installed_triton  # noqa: E402

from lean_launch_probe import OnCuda  # noqa: E402
from sm90_child import run_compiling  # noqa: E402


class _Param:
    def __init__(self, name: str, constexpr: bool, default=None):
        self.name, self.is_constexpr = name, constexpr
        self.has_default, self.default = default is not None, default


class _Compiled:
    """What Triton's normal path returns: a compiled kernel whose ``run`` launches it."""

    function = "fn-handle"
    packed_metadata = ("meta",)

    def __init__(self, log: list):
        self.log = log

    def run(self, *a):
        self.log.append(("lean", a))


class _Kernel:
    """A stand-in for a ``@triton.jit`` kernel: X, n, scale, then BLOCK and FLAG (default 0)."""

    def __init__(self, names=("X", "n", "scale", "BLOCK", "FLAG"), constexprs=(3, 4)):
        self.arg_names = list(names)
        self.constexprs = list(constexprs)
        self.params = [_Param(n, i in constexprs, 0 if n == "FLAG" else None) for i, n in enumerate(names)]
        self.log: list = []
        self.__name__ = "stand_in"

    def __getitem__(self, grid):
        def run(*args, **constants):
            self.log.append(("normal", grid, args, constants))
            return _Compiled(self.log)

        return run


def _lean(fn) -> LeanKernel:
    k = LeanKernel(fn, enabled=True)
    k._device = lambda: 0
    k._stream = lambda device: 7
    return k


def test_a_hit_launches_the_compiled_kernel_with_the_arguments_in_order():
    fn = _Kernel()
    k = _lean(fn)
    x = torch.zeros(8)
    k[(3, 2)](x, 5, 0.5, BLOCK=32, num_warps=4)
    assert [e[0] for e in fn.log] == ["normal"] and fn.log[0][3] == {"BLOCK": 32, "num_warps": 4, **OPTIONS}
    k[(3, 2)](x, 7, 0.25, BLOCK=32, num_warps=4)
    kind, a = fn.log[1]
    assert kind == "lean"
    # grid (z defaults to 1), stream, handle, metadata, no launch metadata or hooks, runtime
    # arguments, then the constants in parameter order (FLAG from its default)
    assert a == (3, 2, 1, 7, "fn-handle", ("meta",), None, None, None, x, 7, 0.25, 32, 0)
    assert (k.hits, k.misses) == (1, 1)


def test_a_hit_hands_the_launcher_cuda_tensors_as_their_addresses_and_others_as_themselves():
    """Triton's launcher takes an int pointer as it is and asks the driver about a tensor's
    address per launch; a tensor not on CUDA stays a tensor, so that the launcher checks it."""
    fn = _Kernel(names=("X", "Y", "n", "BLOCK"), constexprs=(3,))
    k = _lean(fn)
    x, y = torch.zeros(8).as_subclass(OnCuda), torch.zeros(8)
    k[(1,)](x, y, 5, BLOCK=32)
    k[(1,)](x, y, 5, BLOCK=32)
    assert fn.log[0][2] == (x, y, 5)  # a miss compiles from the tensors themselves
    kind, a = fn.log[1]
    assert kind == "lean" and a[9:] == (x.data_ptr(), y, 5, 32) and type(a[9]) is int


def test_a_runtime_argument_given_by_name_is_a_clear_error():
    """The lean path takes runtime arguments in order: one left to a keyword would shift the
    launcher's arguments on a hit, so the miss refuses it."""
    k = _lean(_Kernel())
    with pytest.raises(TypeError, match="takes 3 runtime arguments, got 2"):
        k[(1,)](torch.zeros(8), 5, scale=0.5, BLOCK=32)


def test_tensors_after_scalars_are_handed_over_in_place():
    fn = _Kernel(names=("n", "X", "scale", "BLOCK"), constexprs=(3,))
    k = _lean(fn)
    x = torch.zeros(8).as_subclass(OnCuda)
    for n in (5, 5, 21):
        k[(1,)](n, x, 0.5, BLOCK=32)
    assert [e[0] for e in fn.log] == ["normal", "lean", "lean"]
    assert fn.log[1][1][9:] == (5, x.data_ptr(), 0.5, 32) and fn.log[2][1][9:] == (21, x.data_ptr(), 0.5, 32)


@pytest.mark.parametrize(
    "first, second",
    [
        ((torch.zeros(8), 5), (torch.zeros(8)[1:], 5)),  # alignment
        ((torch.zeros(8), 5), (torch.zeros(8, dtype=torch.float64), 5)),  # dtype
        ((torch.zeros(8), 2), (torch.zeros(8), 1)),  # Triton makes a 1 a constant
        ((torch.zeros(8), 2), (torch.zeros(8), 32)),  # multiples of 16 are marked
        ((torch.zeros(8), 32), (torch.zeros(8), 2**32)),  # int64
        ((torch.zeros(8), 1), (torch.zeros(8), True)),  # equal values, other types (the scalar memo)
    ],
)
def test_what_triton_specializes_on_compiles_again(first, second):
    fn = _Kernel()
    k = _lean(fn)
    k[(1,)](*first, 0.5, BLOCK=32)
    k[(1,)](*second, 0.5, BLOCK=32)
    assert [e[0] for e in fn.log] == ["normal", "normal"]


def test_constants_and_options_are_in_the_key():
    fn = _Kernel()
    k = _lean(fn)
    x = torch.zeros(8)
    k[(1,)](x, 5, 0.5, BLOCK=32)
    k[(1,)](x, 5, 0.5, BLOCK=64)
    k[(1,)](x, 5, 0.5, BLOCK=64, num_warps=8)
    k[(1,)](x, 21, 0.1, BLOCK=64, num_warps=8)
    assert [e[0] for e in fn.log] == ["normal", "normal", "normal", "lean"]


def test_a_launch_hook_takes_the_normal_path():
    fn = _Kernel()
    k = _lean(fn)
    x = torch.zeros(8)
    k[(1,)](x, 5, 0.5, BLOCK=32)
    seen = []
    hook = seen.append
    triton.knobs.runtime.launch_enter_hook.add(hook)
    try:
        k[(1,)](x, 5, 0.5, BLOCK=32)
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hook)
    k[(1,)](x, 5, 0.5, BLOCK=32)
    assert [e[0] for e in fn.log] == ["normal", "normal", "lean"]


def test_disabled_or_leading_constants_take_the_normal_path():
    fn = _Kernel()
    k = LeanKernel(fn, enabled=False)
    x = torch.zeros(8)
    for _ in range(2):
        k[(1,)](x, 5, 0.5, BLOCK=32)
    assert [e[0] for e in fn.log] == ["normal", "normal"]
    # a compile-time parameter before a runtime one: the launcher's argument order is unknown
    assert not LeanKernel(_Kernel(names=("BLOCK", "X", "n"), constexprs=(0,))).enabled


def test_every_launch_asks_for_fma_contraction():
    """Explicitly, on every path: Triton 3.9 warns when the option is left to its default, and
    3.10 turns that default off; the kernels were tuned and checked with it on."""
    assert OPTIONS == {"enable_fp_fusion": True}
    fn = _Kernel()
    x = torch.zeros(8)
    LeanKernel(fn, enabled=False)[(1,)](x, 5, 0.5, BLOCK=32)  # the normal path (interpreter, other releases)
    _lean(fn)[(1,)](x, 5, 0.5, BLOCK=32)  # a miss compiles through it
    assert [e[3]["enable_fp_fusion"] for e in fn.log] == [True, True]


def test_the_interpreter_and_unchecked_triton_versions_take_the_normal_path():
    from tilesparse.backends.triton import kernels
    from tilesparse.backends.triton.op import interpreting

    assert all(lean_supported((3, m)) for m in (6, 7, 8, 9))
    assert not lean_supported((3, 5)) and not lean_supported((3, 10)) and not lean_supported((9, 9))
    assert lean_supported() == (installed_triton() in LEAN_TRITON)
    if interpreting():
        assert not lean(kernels._attn_fwd).enabled
    assert lean(kernels._attn_fwd) is lean(kernels._attn_fwd)


_VALUES = [0, 1, 2, 15, 16, 17, 32, -1, -16, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**32, 2**63 - 1, 2**63, 0.5, 1.0,
           True, False, None]  # fmt: skip


def test_the_key_is_at_least_as_fine_as_tritons():
    """Two arguments with one lean key have one Triton specialization (the installed Triton's)."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    base = torch.zeros(64)
    tensors = [base, base[1:], base[4:], base.to(torch.bfloat16), base.to(torch.int32)[2:], base.to(torch.bool)]
    args = _VALUES + tensors
    by_key: dict = {}
    for a in args:
        spec = native_specialize_impl(BaseBackend, a, False, True, True)
        by_key.setdefault(arg_key([a]), set()).add(repr(spec))
    assert all(len(specs) == 1 for specs in by_key.values()), by_key


def test_a_lean_launch_hands_tritons_launcher_what_tritons_own_launch_does():
    """lean_launch_probe.py on the installed Triton (a kernel compiled for sm_90, a driver that
    records instead of launching): a lean launch passes the launcher the arguments of Triton's
    own launch of the same call, but each CUDA tensor as its address, and None for the launch
    metadata and the two hooks, where Triton passes hook chains that hold no hook (so nothing
    calls either). That holds exactly
    on the releases in LEAN_TRITON: a release where it holds and that is not listed fails here
    until it is recorded (the key test above runs on it too)."""
    r = run_compiling(str(Path(__file__).with_name("lean_launch_probe.py")))
    normal, got = r["normal"], r["lean"]
    assert [a for a in normal if a[0] == "tensor"], normal  # the probe's tensors reach Triton's launcher
    normal = [["int", a[1]] if a[0] == "tensor" else a for a in normal]  # the lean path: their addresses
    assert (r["hits"], r["calls"]) == (1, 3), r  # Triton's launch, the lean miss (Triton's), the lean hit
    hooks = [None, None, None]  # launch metadata, enter hook, exit hook: positions 6 to 8
    same = (len(got) == len(normal) and got[:6] == normal[:6] and got[9:] == normal[9:]
            and [a[1] for a in got[6:9]] == hooks and normal[7:9] == [["hooks", 0], ["hooks", 0]])  # fmt: skip
    assert same == lean_supported(), (
        f"Triton {r['triton']}: the lean launch {'matches' if same else 'differs from'} Triton's own "
        f"({'record the release in' if same else 'take the release out of'} launch.LEAN_TRITON)\n"
        f"Triton's: {normal}\nlean:     {got}"
    )


def test_an_unknown_argument_type_is_a_clear_error():
    with pytest.raises(TypeError, match="argument of type str"):
        arg_key(["x"])


def test_normal_launches_switches_the_lean_path_off_inside_the_block():
    from tilesparse.backends.triton.launch import normal_launches

    fn = _Kernel()
    k = _lean(fn)
    x = torch.zeros(8)
    k[(1,)](x, 5, 0.5, BLOCK=32)
    with normal_launches():
        k[(1,)](x, 5, 0.5, BLOCK=32)
    k[(1,)](x, 5, 0.5, BLOCK=32)
    assert [e[0] for e in fn.log] == ["normal", "normal", "lean"]


# --- Fixed blocks: tensors read once, handed over as one argument ------------------------------


def _cuda(*shapes_and_dtypes):
    return [torch.zeros(n, dtype=d).as_subclass(OnCuda) for n, d in shapes_and_dtypes]


@given(
    before=st.integers(0, 3), inside=st.integers(1, 4), after=st.integers(0, 2), scalars=st.integers(0, 3),
    trailing_tensor=st.booleans(), two_blocks=st.booleans(), offset=st.sampled_from([0, 1]),
    dtype=st.sampled_from([torch.float32, torch.int32, torch.bfloat16]),
)
@settings(max_examples=60, deadline=None)
def test_a_fixed_block_hands_the_launcher_what_its_tensors_would(
    before, inside, after, scalars, trailing_tensor, two_blocks, offset, dtype
):
    """Any layout (tensors before, between and after one or two blocks, scalars, a tensor after
    the scalars), any dtype and alignment: the launcher's arguments equal the tensors' own, and
    the key is a function of what Triton specializes on (equal for equal dtypes, alignment and
    scalar keys; unequal where the block's dtype or alignment differs)."""
    base = torch.zeros(64, dtype=dtype).as_subclass(OnCuda)
    head = _cuda(*[(8, torch.float32)] * before)
    block = [base[offset + 4 * i :][:4] for i in range(inside)]
    mid = _cuda(*[(8, torch.float16)] * after)
    block2 = _cuda(*[(4, torch.int32)] * 2) if two_blocks else []
    tail = list(range(3, 3 + scalars)) + (_cuda((8, torch.float32)) if trailing_tensor else [])
    plain = (*head, *block, *mid, *block2, *tail)
    packed = (*head, Fixed(block), *mid, *((Fixed(block2),) if two_blocks else ()), *tail)
    key_plain, run_plain = prepared(plain)
    key_fixed, run_fixed = prepared(packed)
    assert run_fixed == run_plain
    assert expanded(packed) == plain
    # another block of other tensors with the same dtypes and alignment: the same key
    other = torch.zeros(64, dtype=dtype).as_subclass(OnCuda)
    again = (*head, Fixed([other[offset + 4 * i :][:4] for i in range(inside)]), *mid,
             *((Fixed(_cuda(*[(4, torch.int32)] * 2)),) if two_blocks else ()), *tail)  # fmt: skip
    assert prepared(again)[0] == key_fixed
    # a block of another dtype, or misaligned where this one was aligned: another key
    swapped = torch.float16 if dtype != torch.float16 else torch.float32
    moved = torch.zeros(64, dtype=swapped).as_subclass(OnCuda)
    retyped = (*head, Fixed([moved[offset + 4 * i :][:4] for i in range(inside)]), *packed[before + 1 :])
    assert prepared(retyped)[0] != key_fixed
    if offset == 0 and dtype == torch.float32:
        skewed = (*head, Fixed([base[1 + 4 * i :][:4] for i in range(inside)]), *packed[before + 1 :])
        assert prepared(skewed)[0] != key_fixed


def test_a_fixed_block_compiles_from_its_tensors_and_launches_their_addresses():
    fn = _Kernel(names=("X", "A", "B", "n", "BLOCK"), constexprs=(4,))
    k = _lean(fn)
    x, a, b = _cuda((8, torch.float32), (8, torch.int32), (8, torch.int32))
    block = Fixed([a, b])
    k[(1,)](x, block, 5, BLOCK=32)
    k[(1,)](x, block, 5, BLOCK=32)
    assert fn.log[0][2] == (x, a, b, 5)  # the miss: Triton's own launch, of the tensors
    kind, got = fn.log[1]
    assert kind == "lean" and got[9:] == (x.data_ptr(), a.data_ptr(), b.data_ptr(), 5, 32)
    with pytest.raises(TypeError, match="takes 4 runtime arguments, got 3"):
        k[(1,)](Fixed([a, b]), 5, BLOCK=16)  # the arity counts the block's tensors
    with pytest.raises(TypeError, match="Fixed holds tensors only"):
        Fixed([a, 3])


def test_interned_keys_are_one_int_per_distinct_key():
    assert interned(("a", 1)) == interned(("a", 1)) != interned(("a", 2))
    assert isinstance(interned(("b",)), int)


def test_a_direct_launch_hands_the_c_function_what_tritons_launcher_does():
    """On Triton 3.6 a hit calls the launcher's C function itself (``launch.direct_head``)
    where the kernel takes no scratch memory: with the arguments the launcher's own call passes
    it. On other releases, or with scratch memory, the launcher itself is called."""
    from triton.backends.nvidia.driver import CudaLauncher

    calls = []
    launcher = object.__new__(CudaLauncher)  # its C module is the recorder: nothing compiles
    launcher.__dict__.update(
        launch=lambda *a: calls.append(a), num_ctas=1, global_scratch_size=0, global_scratch_align=1,
        profile_scratch_size=0, profile_scratch_align=1, launch_cooperative_grid=False, launch_pdl=True,
    )  # fmt: skip
    head = direct_head(launcher, ("meta",))
    if installed_triton() != (3, 6):
        assert head is None
        return
    args = (11, 12.5, None, True)
    launcher(3, 2, 1, 7, "fn-handle", ("meta",), None, None, None, *args)
    launcher.launch(3, 2, 1, 7, "fn-handle", *head, *args)
    assert calls[0] == calls[1] and len(calls) == 2
    for scratch in ("global_scratch_size", "profile_scratch_size"):
        setattr(launcher, scratch, 64)
        assert direct_head(launcher, ("meta",)) is None, scratch
        setattr(launcher, scratch, 0)
    assert direct_head(_Compiled([]), ("meta",)) is None  # not Triton's launcher class
