"""The non-finite flag kernel (backends/triton/nonfinite.py) against torch.isfinite, under the
Triton interpreter: any inf or NaN anywhere in one to four (B, H, T, D) tensors, strided
views included, sets it; finite values, the largest included, never do."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesparse.backends.triton.nonfinite import MAX_TENSORS, nonfinite_flag

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@st.composite
def tensor_sets(draw):
    B = draw(st.integers(1, 2))
    D = draw(st.sampled_from([8, 16, 24, 64]))
    dtype = draw(st.sampled_from(DTYPES))
    n = draw(st.integers(1, MAX_TENSORS))
    out = []
    for _ in range(n):
        H, T = draw(st.integers(1, 3)), draw(st.integers(1, 40))
        g = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
        if draw(st.booleans()):  # a view of a (B, T, 3, H, D) projection, as attention modules make
            t = torch.randn((B, T, 3, H, D), generator=g).to(dtype).permute(2, 0, 3, 1, 4)[draw(st.integers(0, 2))]
        else:
            t = torch.randn((B, H, T, D), generator=g).to(dtype)
        out.append(t)
    return out


@settings(max_examples=25, deadline=None)
@given(tensors=tensor_sets(), data=st.data())
def test_flag_is_set_exactly_when_some_element_is_not_finite(tensors, data):
    assert int(nonfinite_flag(*tensors)) == 0
    if data.draw(st.booleans(), label="largest finite value"):
        t = data.draw(st.sampled_from(tensors))
        t[(0,) * 4] = torch.finfo(t.dtype).max
        assert int(nonfinite_flag(*tensors)) == 0
    t = data.draw(st.sampled_from(tensors), label="tensor")
    where = tuple(data.draw(st.integers(0, s - 1)) for s in t.shape)
    t[where] = data.draw(st.sampled_from([float("inf"), float("-inf"), float("nan")]), label="value")
    assert int(nonfinite_flag(*tensors)) == 1


def test_bad_arguments_are_refused():
    q = torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="1 to 4 tensors"):
        nonfinite_flag()
    with pytest.raises(ValueError, match="unit stride in D"):
        nonfinite_flag(q, q.transpose(2, 3))
    with pytest.raises(ValueError, match=r"\(B=1, H, T, D=16\)"):
        nonfinite_flag(q, torch.randn(2, 2, 8, 16))
