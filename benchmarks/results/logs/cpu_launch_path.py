"""An eager call's host time on the CPU with this library's launch path in it (#12): as
``ab_cpu_host.py``, but the stub stands in for Triton's compiled launcher only, so every
``LeanKernel.launch`` computes its key, finds its entry and hands the arguments over as on a
GPU (CPU tensors taken for CUDA ones). Run under TRITON_INTERPRET=1 (no kernel runs).

    TRITON_INTERPRET=1 python3 benchmarks/results/logs/cpu_launch_path.py OUT.json LABEL [--off NAME] [PATTERN ...]

Each row is timed twice, blocks alternating: as the tree runs, and with one change off, named
by ``--off``: ``inline`` (the default: ``launch.inline_fixed()``, every tensor passed one by
one, no ``launch.Fixed``) or ``keyed`` (``launch.keyed_launches()``: no ``launch.Site`` keys,
every launch keyed by all its arguments).
"""
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

import tilesparse as ts
from tilesparse.backends.triton import launch as L
from tilesparse.backends.triton.launch import inline_fixed, keyed_launches

calls = [0]


class _Compiled:
    function = 0
    packed_metadata = (4, 1, 0)

    @staticmethod
    def run(*args):
        calls[0] += 1


_init = L.LeanKernel.__init__


def _lean_init(self, fn, *, enabled=None):
    # the interpreter's stand-in lacks the compiled kernel's constexpr list: read the signature's
    jit = fn.fn if hasattr(fn, "rewrite") else fn
    params = triton.runtime.jit.JITFunction(jit).params
    fn.constexprs = [i for i, p in enumerate(params) if p.is_constexpr]
    fn.params = params
    _init(self, fn, enabled=True)
    self._device = lambda: 0
    self._stream = lambda device: 0


L.LeanKernel.__init__ = _lean_init
L.LeanKernel._normal = lambda self, grid, args, constants: _Compiled()
L._on_cuda = lambda t: True
torch.set_num_threads(1)
PATTERNS = {
    "dense": ts.Dense(),
    "qkdrop0.5": ts.QKDrop(keep=0.5),
    "hash16": ts.Hash(buckets=16),
    "topk16": ts.TopKFeatures(k=16),
}


OFF = {"inline": inline_fixed, "keyed": keyed_launches}


def per_call_us(fn, off: str, n=300, blocks=9) -> dict:
    """Per arm (``tree``, and ``off``: the change turned off): (median over blocks of the mean
    us per call, launches per call); the arms' blocks alternate, so that both see the machine's
    same phases."""
    arms = ("tree", off)

    def arm_context(arm):
        return OFF[off]() if arm == off else contextlib.nullcontext()

    for arm in arms:
        with arm_context(arm):
            for _ in range(30):
                fn()
    means: dict[str, list] = {arm: [] for arm in arms}
    counts = dict.fromkeys(arms, 0)
    for b in range(2 * blocks):
        arm = arms[b % 2]
        with arm_context(arm):
            calls[0] = 0
            t = time.perf_counter_ns()
            for _ in range(n):
                fn()
            means[arm].append((time.perf_counter_ns() - t) / n / 1e3)
            counts[arm] += calls[0]
    return {arm: (round(statistics.median(means[arm]), 1), counts[arm] / (n * blocks)) for arm in arms}


def main() -> None:
    out, label, rest = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    off = "inline"
    if rest[:1] == ["--off"]:
        off, rest = rest[1], rest[2:]
    names = rest or list(PATTERNS)
    rows = {}
    for B, H, Hkv, D, T in ((1, 16, 16, 64, 64), (1, 32, 8, 128, 64)):
        shape = f"B{B}_H{H}_Hkv{Hkv}_D{D}_T{T}"
        g = torch.Generator().manual_seed(0)
        q = torch.randn(B, H, T, D, generator=g).requires_grad_(True)
        k, v = (torch.randn(B, Hkv, T, D, generator=g).requires_grad_(True) for _ in range(2))
        go = torch.randn(q.shape, generator=g)
        for name in names:
            attn = ts.compile(PATTERNS[name], causal=True, backend="triton")
            dec = attn.decide(q, k)
            r = {"fwd": per_call_us(lambda: attn(q, k, v, decisions=dec), off),
                 "fwd_bwd": per_call_us(lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go), off)}
            rows[f"{shape}/{name}"] = r
            print(shape, name, r, flush=True)
    unit = "per arm: [us per call (median over 9 blocks of the mean of 300), launches per call]"
    meta = {"label": label, "off": off, "tilesparse": ts.__file__, "torch": torch.__version__, "unit": unit}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
