"""Launch sites (``launch.Site``): a site's launches hand the launcher what its kernel's general
lean launch hands it, call for call, and every case the site does not key takes that general
launch. On the CPU with a stand-in kernel (as ``test_lean_launch.py``); the GPU test
(``tests/gpu/test_lean_launch_gpu.py``) checks the op's results bitwise against Triton's own
launches."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tilesparse.backends.triton import launch as L  # noqa: E402
from tilesparse.backends.triton.launch import Fixed, Site, keyed_launches, normal_launches  # noqa: E402

from lean_launch_probe import OnCuda  # noqa: E402
from test_lean_launch import _Kernel, _lean  # noqa: E402


def _stand_in(n_tensors: int, n_block: int, n_scalars: int) -> _Kernel:
    names = [f"T{i}" for i in range(n_tensors)] + [f"B{i}" for i in range(n_block)]
    names += [f"s{i}" for i in range(n_scalars)] + ["BLOCK", "FLAG"]
    return _Kernel(names=tuple(names), constexprs=(len(names) - 2, len(names) - 1))


def _cuda(n: int, dtype: torch.dtype, offset: int = 0) -> torch.Tensor:
    return torch.zeros(n + offset, dtype=dtype).as_subclass(OnCuda)[offset:]


_SCALAR_KINDS = {
    "int": st.sampled_from([1, 2, 16, 32, 48, 7, 2**31, 2**40]),
    "float": st.sampled_from([0.5, 1.0, 0.125]),
    "bool": st.booleans(),
    "none": st.none(),
}
# the last scalar only: a poison (aligned or not) or None in its place
_POISON = st.sampled_from([None, 0, 0, 1]).map(lambda offset: None if offset is None else _cuda(1, torch.float32, offset))


@st.composite
def _calls(draw):
    """A site's layout (its scalars' types fixed) and three calls of it: tensors of the
    layout's dtypes (some misaligned, the first sometimes of another dtype), a block among two,
    scalars of the layout's types."""
    dtypes = draw(st.lists(st.sampled_from([torch.float32, torch.bfloat16, torch.int32]), max_size=3))
    n_block = draw(st.integers(0, 3))
    kinds = draw(st.lists(st.sampled_from(list(_SCALAR_KINDS)), max_size=4))
    poisoned = draw(st.booleans())
    blocks = [Fixed([_cuda(8, torch.int32) for _ in range(n_block)]) for _ in range(2)] if n_block else [None]
    calls = []
    for _ in range(3):
        offsets = draw(st.lists(st.sampled_from([0, 0, 0, 1]), min_size=len(dtypes), max_size=len(dtypes)))
        retyped = [torch.float16, *dtypes[1:]] if dtypes and draw(st.booleans()) else dtypes
        tensors = tuple(_cuda(8, d, o) for d, o in zip(retyped, offsets, strict=True))
        block = draw(st.sampled_from(blocks))
        scalars = tuple(draw(_SCALAR_KINDS[k]) for k in kinds) + ((draw(_POISON),) if poisoned else ())
        calls.append((tensors, () if block is None else (block,), scalars))
    return len(dtypes), n_block, calls


@given(_calls(), st.sampled_from([(3,), (3, 2), (3, 2, 4)]), st.booleans())
@settings(max_examples=80, deadline=None)
def test_a_site_hands_the_launcher_what_the_general_launch_does(case, grid, varying):
    """The same calls through a site and through its kernel's general launch (two stand-in
    kernels): their launchers see the same launches, compiles and arguments alike, the site's
    scalars keyed by value or (``varying``) as Triton specializes them."""
    n_tensors, n_block, calls = case
    n_scalars = len(calls[0][2])
    general, sited = (_stand_in(n_tensors, n_block, n_scalars) for _ in range(2))
    kernel = _lean(general)
    site = Site(_lean(sited), grid, {"BLOCK": 32, "num_warps": 4}, varying=varying)
    for tensors, rest, scalars in calls * 2:
        kernel.launch(grid, (*tensors, *rest, *scalars), {"BLOCK": 32, "num_warps": 4})
        site(tensors, rest, scalars)
    assert sited.log == [_padded(e) for e in general.log]


def _padded(entry):
    """A general launch's log entry as a site's: the normal path's grid is the site's, padded."""
    if entry[0] == "normal":
        kind, grid, args, constants = entry
        return kind, (*grid, *(1,) * (3 - len(grid))), args, constants
    return entry


def _site(n_tensors=1, n_block=1, n_scalars=1):
    fn = _stand_in(n_tensors, n_block, n_scalars)
    return fn, Site(_lean(fn), (2,), {"BLOCK": 32})


def test_a_hit_launches_from_the_site_alone():
    fn, site = _site()
    x = _cuda(8, torch.float32)
    block = Fixed([_cuda(8, torch.int32)])
    calls = []
    site.kernel.launch = lambda *a, **k: calls.append(a) or L.LeanKernel.launch(site.kernel, *a, **k)
    site((x,), (block,), (5,))  # a miss: the kernel's launch compiles
    assert len(calls) == 1 and [e[0] for e in fn.log] == ["normal"]
    y = _cuda(8, torch.float32)
    reading = site((y,), (block,), (5,))  # a hit: the site's entry, the kernel's key untouched
    assert len(calls) == 1 and [e[0] for e in fn.log] == ["normal", "lean"]
    assert fn.log[1][1][9:] == (y.data_ptr(), block.addresses[0], 5, 32, 0)
    assert reading == ((torch.float32,), (y.data_ptr(),))
    site((x,), (block,), (5,), reading)  # a reading handed over is the one launched (a pair's second)
    assert fn.log[2][1][9] == y.data_ptr()


def test_what_a_site_does_not_key_takes_the_general_launch():
    fn, site = _site()
    x, a, b = _cuda(8, torch.float32), _cuda(8, torch.int32), _cuda(8, torch.int32)
    general = []
    launch = site.kernel.launch
    site.kernel.launch = lambda *args, **kw: general.append(args[1]) or launch(*args, **kw)
    block = Fixed([a])
    site((x,), (block,), (5,))
    site((x,), (block,), (5,))
    assert len(general) == 1  # the miss alone
    site((x,), (a,), (5,))  # the block's tensors one by one (inline_fixed)
    site((_cuda(8, torch.float32, 1),), (block,), (5,))  # an unaligned tensor
    with keyed_launches():
        site((x,), (block,), (5,))
    with normal_launches():
        site((x,), (block,), (5,))
    assert len(general) == 5
    assert fn.log[-1][0] == "normal"
    two = Fixed([b])
    fn2 = _stand_in(1, 2, 1)
    site2 = Site(_lean(fn2), (2,), {"BLOCK": 32})
    site2((x,), (block, two), (5,))  # two blocks: not a site's layout
    assert fn2.log[0][2] == (x, a, b, 5)


def test_a_poison_as_the_last_scalar_is_kept_by_its_dtype_and_passed_as_its_address():
    """The forward's poison (a 0-d tensor, the last scalar, None on calls without one): one
    entry for a poison of any address, one for None, no type error between them; its address
    reaches the launcher as the general launch hands it over."""
    fn, site = _site(n_scalars=2)
    x, block = _cuda(8, torch.float32), Fixed([_cuda(8, torch.int32)])
    general = []
    launch = site.kernel.launch
    site.kernel.launch = lambda *args, **kw: general.append(args[1]) or launch(*args, **kw)
    poisons = [_cuda(1, torch.float32) for _ in range(3)]
    for p in poisons:
        site((x,), (block,), (5, p))
    assert len(site.entries) == 1 and len(general) == 1  # the first a miss, then hits
    assert [e[0] for e in fn.log] == ["normal", "lean", "lean"]
    assert fn.log[0][2][-1] is poisons[0]
    assert [e[1][-3] for e in fn.log[1:]] == [p.data_ptr() for p in poisons[1:]]
    site((x,), (block,), (5, None))
    site((x,), (block,), (5, None))
    assert len(site.entries) == 2 and len(general) == 2
    site((x,), (block,), (5, _cuda(1, torch.float32, 1)))  # an unaligned poison: the general launch
    assert len(general) == 3 and len(site.entries) == 2


def test_a_tensor_among_the_scalars_but_the_last_is_launched_never_kept():
    fn, site = _site(n_scalars=2)
    x, block = _cuda(8, torch.float32), Fixed([_cuda(8, torch.int32)])
    t = _cuda(1, torch.float32)
    for _ in range(3):
        site((x,), (block,), (t, 5))
    assert site.entries == {}
    assert fn.log[-1][0] == "lean" and fn.log[-1][1][-4] == t.data_ptr()


def test_scalars_that_change_types_are_a_clear_error():
    """An int 1 and True are one key: a site whose scalars change types would take the other's
    entry, so a miss checks them."""
    _, site = _site()
    x, block = _cuda(8, torch.float32), Fixed([_cuda(8, torch.int32)])
    site((x,), (block,), (5,))
    with pytest.raises(TypeError, match="scalars changed types to \\['bool'\\], from \\['int'\\]"):
        site((x,), (block,), (False,))


def test_a_site_keeps_a_bounded_number_of_entries():
    _, site = _site()
    x, block = _cuda(8, torch.float32), Fixed([_cuda(8, torch.int32)])
    for n in range(L._SITE_ENTRIES + 5):
        site((x,), (block,), (n,))
    assert len(site.entries) <= L._SITE_ENTRIES


def test_sites_by_key_are_made_once_and_bounded(monkeypatch):
    fn = _stand_in(1, 0, 1)
    monkeypatch.setattr(L, "lean", _lean)
    sites = L.Sites(fn)
    made = []

    def grid_and_constants():
        made.append(1)
        return (4,), {"BLOCK": 16}

    a = sites.get(("sizes", 1), grid_and_constants)
    assert sites.get(("sizes", 1), grid_and_constants) is a and len(made) == 1
    assert a.grid == (4, 1, 1) and a.constants == {"BLOCK": 16} and a.kernel.fn is fn
    for n in range(L._SITES_KEPT + 3):
        sites.get(("sizes", n + 2), grid_and_constants)
    assert len(sites.sites) <= L._SITES_KEPT


def test_a_varying_site_keeps_one_entry_for_values_triton_specializes_alike():
    fn = _stand_in(1, 0, 1)
    site = Site(_lean(fn), (2,), {"BLOCK": 32}, varying=True)
    x = _cuda(8, torch.float32)
    for position in (3, 5, 7, 9, 11):  # ints that are not 1 and no multiple of 16: one specialization
        site((x,), (), (position,))
    assert len(site.entries) == 1 and [e[0] for e in fn.log] == ["normal", "lean", "lean", "lean", "lean"]
    assert fn.log[-1][1][9:11] == (x.data_ptr(), 11)
    site((x,), (), (32,))  # a multiple of 16: Triton's other specialization, another entry
    assert len(site.entries) == 2 and fn.log[-1][0] == "normal"
