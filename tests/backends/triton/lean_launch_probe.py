"""Launch a small kernel through Triton's own ``kernel[grid]`` path and through the lean one
(launch.py), both compiled for sm_90 without a GPU, and print what each hands Triton's
launcher as one JSON line (run as a script with TRITON_INTERPRET=0: an interpreted kernel
cannot be compiled).

A stand-in driver reports an sm_90 device and records the launcher's calls instead of
launching: the launcher itself is Triton's, the same object on both paths, so equal arguments
mean the lean path launches what Triton would. The kernel has what the attention kernels
have: tensors, specialized and ``do_not_specialize`` ints, a float, a bool, an optional
pointer given as None (the forward's poison without checked ids), and compile-time parameters
last, one of them left to its default. Its tensors say they are on CUDA (a
subclass), so that the lean launch hands the launcher their addresses, as it does on a GPU.
"""

import json

import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.runtime.driver import driver

from tilesparse.backends.triton.launch import LeanKernel

STREAM = 1234
_calls: list[tuple] = []


class _RecordingLauncher:
    """Stands in for the driver's launcher class: records each call's arguments."""

    def __init__(self, src, metadata):
        pass

    def __call__(self, *args):
        _calls.append(args)


class _Utils:
    def load_binary(self, name, kernel, shared, device):
        return "module", 0xF00D, 32, 0, 1024  # module, function handle, registers, spills, max threads

    def get_device_properties(self, device):
        return {"max_shared_mem": 232448, "multiprocessor_count": 132}


class _Sm90Driver:
    """What Triton's launch path asks of a driver, for an sm_90 device 0 with no GPU behind it."""

    launcher_cls = _RecordingLauncher

    def __init__(self):
        self.utils = _Utils()

    def get_current_device(self):
        return 0

    def get_current_stream(self, device):
        return STREAM

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


@triton.jit(do_not_specialize=["m"])
def _axpb(X, Y, n, m, scale, flag, P, BLOCK: tl.constexpr, SHIFT: tl.constexpr = 0):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n)
    if flag:
        x = x * scale
    if P is not None:
        x = x * tl.load(P)
    tl.store(Y + offs, x + m + SHIFT, mask=offs < n)


class OnCuda(torch.Tensor):
    """A CPU tensor that reports being on CUDA (``is_cuda``): the lean path passes its address."""

    is_cuda = True


def _encode(args: tuple) -> list:
    """JSON-able arguments: tensors by address, hook chains by how many hooks they hold."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(["tensor", a.data_ptr()])
        elif type(a).__name__ == "HookChain":
            out.append(["hooks", len(a.calls)])
        elif a is None or isinstance(a, (bool, int, float, str)):
            out.append([type(a).__name__, a])
        elif isinstance(a, tuple):
            out.append(["tuple", list(a)])
        else:
            out.append(["object", type(a).__name__])
    return out


if __name__ == "__main__":
    driver.set_active(_Sm90Driver())
    x, y = (torch.zeros(256).as_subclass(OnCuda) for _ in range(2))
    args = (x, y, 200, 7, 0.5, True, None)
    _axpb[(3, 2)](*args, BLOCK=128, num_warps=4)
    (normal,) = _calls
    lean = LeanKernel(_axpb, enabled=True)
    lean._device = lambda: 0
    lean._stream = lambda device: STREAM
    lean[(3, 2)](*args, BLOCK=128, num_warps=4)  # a miss: compiled (cached) through the normal path
    lean[(3, 2)](*args, BLOCK=128, num_warps=4)  # a hit: the lean launch
    print(json.dumps({"triton": triton.__version__, "hits": lean.hits, "calls": len(_calls),
                      "normal": _encode(normal), "lean": _encode(_calls[-1])}))  # fmt: skip
