"""The split-K decode kernel compiled for the H200 (sm_90) on the CPU, dense and compressed
keys, bf16/fp16, D 64 and 128, with and without the not-self test: what the interpreter
accepts and the GPU compiler may not (non-power-of-two aranges, loop-carried scalar types),
and shared memory within a block's limit. Compiled with Triton's bundled ptxas in a
subprocess with TRITON_INTERPRET=0 (the kernels must be JIT functions, not interpreted ones)."""

from __future__ import annotations

import itertools

from sm90_child import run_compiling

from tilesparse.backends.triton.sm90 import SHARED_LIMIT

_COMPILE = r"""
import itertools, json, os, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tilesparse.backends.triton import decode
pointers = {"Q": "fp32", "K": None, "V": None, "KIDS": "i16", "KVALS": None, "INDEX": "i32", "SLOT": "i32",
            "LO": "i32", "COUNT": "i32", "O_PART": "fp32", "LSE_PART": "fp32"}
out = {}
for dtype, d, sparse, not_self in itertools.product(["bf16", "fp16"], [64, 128], [False, True], [False, True]):
    const = dict(GROUP=1, HEAD_DIM=d, BLOCK_D=d, BLOCK_N=64, N_SPLITS=64, SPARSE=sparse, KF=8, KF_PAD=8,
                 NOT_SELF=not_self)
    sig = {}
    for name in decode._decode_split.arg_names:
        if name in const:
            sig[name] = "constexpr"
        elif name in pointers:
            sig[name] = "*" + (pointers[name] or dtype)
        else:
            sig[name] = "fp32" if name == "qk_scale" else "i32"
    k = triton.compile(ASTSource(decode._decode_split, sig, const), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=4, num_stages=2))
    out[f"{dtype}-{d}-{sparse}-{not_self}"] = k.metadata.shared
print(json.dumps(out))
"""


def test_decode_kernel_compiles_for_sm90():
    shared = run_compiling("-c", _COMPILE, timeout=900)
    assert len(shared) == len(list(itertools.product([0, 1], [0, 1], [0, 1], [0, 1])))
    assert all(s <= SHARED_LIMIT for s in shared.values()), shared
