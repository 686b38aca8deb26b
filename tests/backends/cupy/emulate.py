"""Run the CuPy backend's ``.cu`` kernels on the CPU through ``cuda_emulator.h`` (g++, fibers
for threads), launched exactly as on the GPU: same argument lists, grids and block sizes.

:func:`emulated_kernels` gives a ``CudaKernels`` whose launches go to the emulator;
:func:`emulated_index_launch` replaces ``tilesparse.backends.cupy.index._launch``. Tensors must
be contiguous CPU tensors.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tilesparse.backends.cupy import compile as cc
from tilesparse.backends.cupy.layout import NT, shared_bytes
from tilesparse.backends.cupy.op import CudaKernels, _arg

HERE = Path(__file__).parent
HEAD_DIMS = (16, 32, 64, 128, 256)
DTYPES = ("F32", "F16", "BF16")
INSTANCES = {
    "sfa.cu": tuple(
        [f"sfa_compress_keys<{t}>" for t in DTYPES]
        + [f"{k}<{t}, {d}>" for k in ("sfa_fwd", "sfa_bwd_dq", "sfa_bwd_dkdv") for t in DTYPES for d in HEAD_DIMS]
    ),
    "index.cu": ("index_count<F32>", "index_count<F16>", "index_count<BF16>", "index_scatter"),
}
SHARED_ARRAYS = 1 << 17  # elements of each extern shared array (512 KiB of floats: past any block's size + canary)


def available() -> str | None:
    """None when the emulator can be built, else why not."""
    return None if shutil.which("g++") else "g++ is not on PATH"


def _translate(text: str) -> str:
    """A kernel source as host C++: shared memory becomes static storage (blocks run one at a
    time), extern shared arrays become namespace-scope arrays defined after the kernels."""
    text = text.replace("extern __shared__", "extern")
    return text.replace("__shared__", "static")


@functools.lru_cache(maxsize=None)
def library(name: str) -> tuple[ctypes.CDLL, dict[str, str]]:
    """The emulated ``kernels/<name>``: (the loaded library, name expression -> launcher symbol)."""
    text = _translate(cc.source_file(name))
    extern = sorted(set(re.findall(r"extern (\w+) (\w+)\[\];", text)))
    launchers, symbols = [], {}
    for i, inst in enumerate(INSTANCES[name]):
        sym = f"launch_{i}"
        symbols[inst] = sym
        launchers.append(
            f'extern "C" int {sym}(void** a, int gx, int gy, int gz, int nt, long smem) '
            f"{{ return launch_guarded(smem, [&] {{ emu::run(&{inst}, a, gx, gy, gz, nt); }}); }}"
        )
    arrays = "\n".join(f"alignas(16) {t} {n}[{SHARED_ARRAYS}];" for t, n in extern)
    names = [n for _, n in extern]
    guard = f"""
static long g_smem = 0;
static void poison() {{ {" ".join(f"memset((void*){n}, 0xff, g_smem);" for n in names)} }}
static const long CANARY = 4096;
template <class F> static int launch_guarded(long smem, F run) {{
    g_smem = smem;
    {" ".join(f"memset((char*){n} + smem, 0xa5, CANARY);" for n in names)}
    emu::on_block = poison;
    run();
    emu::on_block = nullptr;
    for (long i = 0; i < CANARY; ++i) {{
        {" ".join(f"if (((unsigned char*){n})[smem + i] != 0xa5) return 1;" for n in names)}
    }}
    return 0;
}}
"""
    unit = f'#include "{HERE / "cuda_emulator.h"}"\n{text}\n{arrays}\n{guard}\n' + "\n".join(launchers) + "\n"
    key = hashlib.sha256((unit + (HERE / "cuda_emulator.h").read_text()).encode()).hexdigest()[:16]
    build = Path(tempfile.gettempdir()) / "tilesparse-cuda-emulator"
    build.mkdir(exist_ok=True)
    so = build / f"{name}-{key}.so"
    if not so.exists():
        src = build / f"{name}-{key}-{os.getpid()}.cpp"
        src.write_text(unit)
        tmp = build / f"{name}-{key}-{os.getpid()}.tmp.so"  # renamed into place: concurrent runs never see half a file
        res = subprocess.run(["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-w", "-o", str(tmp), str(src)],
                             capture_output=True, text=True, check=False)  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"emulator build of {name} failed:\n{res.stderr[-4000:]}")
        tmp.rename(so)
    return ctypes.CDLL(str(so)), symbols


_CTYPES = {np.uint64: ctypes.c_uint64, np.int64: ctypes.c_int64, np.int32: ctypes.c_int32, np.float32: ctypes.c_float}


def launch(name: str, instance: str, grid: tuple[int, ...], block: int, smem: int, *args) -> None:
    """Run ``instance`` of ``kernels/<name>`` over ``grid`` with ``block`` threads and ``smem``
    bytes of dynamic shared memory; raise when the kernel wrote past them."""
    lib, symbols = library(name)
    values = [_CTYPES[type(a)](a) for a in (_arg(x) for x in args)]
    ptrs = (ctypes.c_void_p * len(values))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in values])
    gx, gy, gz = (*grid, 1, 1)[:3]
    fn = getattr(lib, symbols[instance])
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    if fn(ptrs, gx, gy, gz, block, smem):
        raise AssertionError(f"{instance} wrote past its {smem} bytes of dynamic shared memory")


class EmulatedKernels(CudaKernels):
    """CudaKernels whose launches run in the emulator."""

    def _launch(self, kernel, grid, k, *args) -> None:
        launch("sfa.cu", self.names[kernel], grid, NT, shared_bytes(kernel, self.head_dim, k), *args)


def emulated_kernels(head_dim: int, dtype) -> EmulatedKernels:
    return EmulatedKernels(head_dim, dtype)


def emulated_index_launch(name: str, grid, block: int, smem: int, *args) -> None:
    """Drop-in for ``tilesparse.backends.cupy.index._launch``."""
    launch("index.cu", name, grid, block, smem, *args)
