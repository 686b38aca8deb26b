"""Kept device tensors (patterns/device_constants.py): made once per (values, dtype, device),
equal to ``torch.tensor(values)``; the capturable build (used when a CUDA graph capture meets a
head list first) gives the same values from fills. The pool escape itself is checked on the
GPU by tests/gpu/test_graph_capture_gpu.py (reduce-overhead training)."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesparse.patterns.device_constants import _filled, device_constant, outside_graph_pools


@settings(max_examples=50, deadline=None)
@given(values=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=12) | st.lists(st.integers(0, 8), min_size=1, max_size=12),
       dtype=st.sampled_from([torch.int32, torch.int64]))  # fmt: skip
def test_the_capturable_build_gives_the_values(values, dtype):
    values = tuple(sorted(values)) if len(values) % 2 else tuple(values)  # runs of consecutive ids, and none
    assert torch.equal(_filled(values, dtype, torch.device("cpu")), torch.tensor(values, dtype=dtype))


def test_a_constant_is_made_once_per_values_dtype_and_device():
    a = device_constant((3, 4, 5), torch.int64, torch.device("cpu"))
    assert torch.equal(a, torch.tensor([3, 4, 5])) and a.dtype == torch.int64
    assert device_constant((3, 4, 5), torch.int64, torch.device("cpu")) is a
    b = device_constant((3, 4, 5), torch.int32, torch.device("cpu"))
    assert b is not a and b.dtype == torch.int32
    assert device_constant((3, 5), torch.int64, torch.device("cpu")) is not a


def test_outside_graph_pools_runs_directly_on_the_cpu():
    assert outside_graph_pools(torch.device("cpu"), lambda: 7) == 7
