"""Why no Triton kernel can run on given inputs: shared by the attention backend and the index
builder (each adds its own reasons)."""

from __future__ import annotations

import functools
import importlib.util

import torch

from ...ir import AttentionInputs

__all__ = ["HAVE_TRITON", "device_reasons", "triton_reasons"]

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def triton_reasons(inputs: AttentionInputs) -> list[str]:
    """Why Triton kernels cannot run on ``inputs``' device (empty when they can)."""
    return device_reasons(inputs.device)


def device_reasons(device: torch.device) -> list[str]:
    """Why Triton kernels cannot run on ``device`` (empty when they can)."""
    if not HAVE_TRITON:
        return ["triton is not installed (pip install 'triton>=3.6', or the Triton your torch requires)"]
    from .op import interpreting

    reasons = []
    if device.type == "cpu" and not interpreting():
        reasons.append("inputs are on the CPU: triton runs on CUDA, or on the CPU under TRITON_INTERPRET=1")
    if device.type == "cuda":
        cap = _capability(torch.cuda.current_device() if device.index is None else device.index)
        if cap < (8, 0):
            reasons.append(f"GPU compute capability {cap} < (8, 0)")
    return reasons


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    """A GPU's compute capability, read from the driver once per device (it cannot change while
    the process runs; a call that checks its device would otherwise ask on every call)."""
    return torch.cuda.get_device_capability(index)
