"""Compile, for sm_90, the smallest kernel that shows :data:`versions.CARRIED_SCALAR_FOLDED` and
print what the compiler made of its loop-carried scalar as one JSON line (run as a script with
TRITON_INTERPRET=0: an interpreted kernel cannot be compiled).

The kernel is the shape of the attention kernels' segment loop: a scalar (``prev_hi``, the end
of the previous segment) carried through an outer loop that holds a tile loop with a dot. The
TTIR keeps it as a loop-carried value; on an affected release the TTGIR's ``lo = max(lo_r,
prev_hi)`` reads the constant it started from instead.
"""

import json
import re

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def _segment_loop(RNG, X, OUT, nseg, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tile = offs[:, None] * BLOCK + offs[None, :]
    x = tl.load(X + tile)
    acc = tl.zeros([BLOCK, BLOCK], tl.float32)
    prev_hi = 0
    for s in range(nseg):
        lo = tl.maximum(tl.load(RNG + 2 * s), prev_hi)
        hi = tl.load(RNG + 2 * s + 1)
        for t in range(lo, hi):
            acc += tl.dot(x, tl.load(X + t * BLOCK * BLOCK + tile))
        prev_hi = hi
    tl.store(OUT + tile, acc)


def _max_operand(ir: str) -> str:
    """The second operand of the one ``arith.maxsi`` (``max(lo_r, prev_hi)``)."""
    (operand,) = re.findall(r"arith\.maxsi %\w+, (%\w+)", ir)
    return operand


if __name__ == "__main__":
    sig = {"RNG": "*i32", "X": "*fp16", "OUT": "*fp32", "nseg": "i32", "BLOCK": "constexpr"}
    src = ASTSource(_segment_loop, sig, {"BLOCK": 64})
    k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=3))
    ttir, ttgir = _max_operand(k.asm["ttir"]), _max_operand(k.asm["ttgir"])
    print(json.dumps({"triton": triton.__version__, "ttir_operand": ttir, "ttgir_operand": ttgir}))
