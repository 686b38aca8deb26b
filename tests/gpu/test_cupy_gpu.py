"""The CuPy backend on a real GPU (H200): the kernels against the masked dense reference, the
fused index build against ``tilesparse.ir.prepare_group``, the compressed-key bytes.

Each test runs every case, prints one PASS/FAIL line per case (with the errors), and fails at
the end listing the failed cases, so one run says everything (no hypothesis shrinking):

- random TopKFeatures specs (alone, with Hash, with QKDrop, under PerHead), causal or not,
  T up to 2,048, k in 1..16, D in {64, 128, 256}, GQA, fp32/fp16/bf16: output and the three
  gradients (``TILESPARSE_GPU_EXAMPLES``, default 40);
- the same through ``ts.compile(spec, backend="cupy")`` (planner -> prepare -> attend);
- index build: every layout, causal or not, strict or not, blocks (64, 64) and (128, 64),
  T from 1 to 5,000: every tensor bit-identical to the torch path; LSH in the kernel against
  the ``lsh`` criterion with the same generator (near-tie flips only);
- compressed keys: bytes per token, measured on the built tensors, against dense K.

Run: ``python3 -m pytest -q -s -m gpu tests/gpu/test_cupy_gpu.py -p no:cacheprovider``.
"""

from __future__ import annotations

import os
import traceback

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends import REGISTRY
from tilesparse.backends.cupy import index as cindex
from tilesparse.backends.cupy.layout import BN, compressed_key_bytes
from tilesparse.backends.cupy.op import CudaKernels, feature_attention
from tilesparse.patterns import get_criterion
from tilesparse.patterns.criteria import lsh_draw
from tilesparse.testing import assert_equivalent

DEVICE = torch.device("cuda")
EXAMPLES = int(os.environ.get("TILESPARSE_GPU_EXAMPLES", "40"))
TOL = {torch.float32: 2e-3, torch.float16: 5e-3, torch.bfloat16: 3e-2}


def _specs(k):
    top = ts.TopKFeatures(k=k)
    return [
        top,
        ts.Hybrid(parts=[ts.Hash(buckets=8), top]),
        ts.Hybrid(parts=[ts.QKDrop(keep=0.5), top]),
        ts.Hybrid(parts=[ts.QKDrop(keep=0.7), ts.Hash(buckets=3, attend_self=False), top]),
        ts.PerHead(dense_heads=[0], rest=top),
    ]


class CupyOp:
    """TopKFeatures groups through the CUDA kernels, dense groups through SDPA; the interface
    ``assert_equivalent`` uses."""

    def __init__(self, spec, causal):
        self.spec = spec
        self.compiled = ts.compile(spec, causal=causal, backend="reference")
        self.program = ir.lower(spec, causal=causal, block_q=64, block_k=BN)

    def __repr__(self):
        return f"CupyOp({self.spec}, causal={self.compiled.causal})"

    def __call__(self, q, k, v, *, decisions):
        B, H, T, D = q.shape
        inputs = ir.check_inputs(q, k, v)
        prepared = ir.prepare(self.program, decisions, batch=B, heads=H, seqlen=T, device=q.device)
        out = q.new_empty(q.shape)
        outs = []
        for g in prepared.groups:
            if isinstance(g.group.score, ir.FeatureDotScore):
                o = feature_attention(q, k, v, g, D**-0.5, impl=CudaKernels(D, q.dtype)).to(q.dtype)
            else:
                o = REGISTRY["sdpa"].attend_heads(g.group, g.heads, inputs)
            outs.append((g.heads, o))
        if len(outs) == 1:
            return outs[0][1]
        for heads, o in outs:
            out[:, list(heads)] = o
        return out

    def reference(self, q, k, v, **kw):
        return self.compiled.reference(q, k, v, **kw)


def _report(results):
    failed = [r for r in results if not r[0]]
    print(f"\n{len(results) - len(failed)} of {len(results)} cases pass")
    assert not failed, "failed cases:\n" + "\n".join(r[1] for r in failed)


def _line(ok, what, detail):
    line = f"{'PASS' if ok else 'FAIL'} {what}: {detail}"
    print(line, flush=True)
    return ok, line


# ---------------------------------------------------------------------------------------------
# kernels against the reference


def test_which_compiler_builds_the_kernels():
    from tilesparse.backends.cupy.compile import module

    mod = module("sfa.cu", tuple(CudaKernels(64, torch.bfloat16).names.values()))
    print(f"\nsfa.cu compiled with {mod.compiler}")
    assert mod.compiler in ("nvrtc", "nvcc")


@pytest.mark.parametrize("compiler", ["nvcc", "nvrtc"])
def test_each_compiler_gives_working_kernels(compiler, monkeypatch):
    import shutil

    from tilesparse.backends.cupy.compile import module

    assert compiler != "nvcc" or shutil.which("nvcc"), "nvcc is not on PATH: this test checks both compilers"
    monkeypatch.setenv("TILESPARSE_CUPY_COMPILER", compiler)
    module.cache_clear()
    try:
        spec = ts.Hybrid(parts=[ts.Hash(buckets=3), ts.TopKFeatures(k=8)])
        g = torch.Generator(DEVICE).manual_seed(0)
        q, k, v = (torch.randn((1, 2, 300, 128), generator=g, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
        op = CupyOp(spec, True)
        errors = assert_equivalent(op, q, k, v, decisions=op.compiled.decide(q, k, generator=g), atol=TOL[torch.bfloat16])
        print(f"\n{compiler}: {errors}")
    finally:
        module.cache_clear()


def test_cupy_kernels_match_the_reference():
    results = []

    @settings(max_examples=EXAMPLES, deadline=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck),
              database=None)  # fmt: skip
    @given(
        k=st.sampled_from([1, 4, 8, 16]),
        which=st.integers(0, 4),
        causal=st.booleans(),
        T=st.one_of(st.integers(1, 200), st.integers(200, 2048)),
        heads=st.sampled_from([(2, 2), (4, 2), (3, 1)]),
        D=st.sampled_from([64, 128, 256]),
        dtype=st.sampled_from([torch.bfloat16, torch.float16, torch.float32]),
        seed=st.integers(0, 2**31 - 1),
    )
    def case(k, which, causal, T, heads, D, dtype, seed):
        spec = _specs(k)[which]
        H, Hkv = heads
        what = f"{spec} causal={causal} T={T} H={H}/{Hkv} D={D} {str(dtype)[6:]}"
        try:
            g = torch.Generator(DEVICE).manual_seed(seed)
            q = torch.randn((1, H, T, D), generator=g, device=DEVICE, dtype=dtype)
            kk, v = (torch.randn((1, Hkv, T, D), generator=g, device=DEVICE, dtype=dtype) for _ in range(2))
            op = CupyOp(spec, causal)
            dec = op.compiled.decide(q, kk, generator=g)
            errors = assert_equivalent(op, q, kk, v, decisions=dec, atol=TOL[dtype])
            results.append(_line(True, what, " ".join(f"{n}={e:.1e}" for n, e in errors.items())))
        except Exception as e:  # noqa: BLE001 - record every case, fail at the end
            results.append(_line(False, what, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))

    case()
    _report(results)


@pytest.mark.parametrize("causal", [True, False])
def test_compiled_with_backend_cupy(causal):
    results = []
    for spec in _specs(8)[:4]:
        for T, D, dtype in ((300, 64, torch.bfloat16), (1000, 128, torch.float16), (257, 256, torch.float32)):
            what = f"ts.compile({spec}, backend='cupy') causal={causal} T={T} D={D} {str(dtype)[6:]}"
            try:
                g = torch.Generator(DEVICE).manual_seed(T)
                q, k, v = (torch.randn((2, 4, T, D), generator=g, device=DEVICE, dtype=dtype) for _ in range(3))
                attn = ts.compile(spec, causal=causal, backend="cupy")
                errors = assert_equivalent(attn, q, k[:, :2], v[:, :2], atol=TOL[dtype])
                results.append(_line(True, what, " ".join(f"{n}={e:.1e}" for n, e in errors.items())))
            except Exception as e:  # noqa: BLE001
                results.append(_line(False, what, f"{type(e).__name__}: {e}"))
    _report(results)


def test_a_row_without_keys_gives_zeros_and_zero_gradients():
    q, k, v = (torch.randn((1, 2, 130, 64), device=DEVICE, requires_grad=True) for _ in range(3))
    spec = ts.Hybrid(parts=[ts.QKDrop(keep=1.0), ts.TopKFeatures(k=4)])
    attn = ts.compile(spec, causal=True, backend="cupy")
    dec = attn.decide(q, k)
    dec = ts.Decisions(q_keep=dec.q_keep, k_keep=torch.zeros_like(dec.k_keep), q_support=dec.q_support, k_support=dec.k_support)
    out = attn(q, k, v, decisions=dec)
    grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert not out.any() and all(torch.isfinite(t).all() and not t.any() for t in grads)


# ---------------------------------------------------------------------------------------------
# the fused index build against prepare_group

INDEX_SPECS = [
    ts.Dense(),
    ts.QKDrop(keep=0.6),
    ts.Hash(buckets=16),
    ts.Hash(buckets=3, attend_self=False),
    ts.Hash(buckets=1),
    ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.7)]),
    ts.Hybrid(parts=[ts.QKDrop(keep=0.3), ts.Hash(buckets=64), ts.TopKFeatures(k=8)]),
]
FIELDS = ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges", "k_nseg",
          "q_support", "k_support")  # fmt: skip


def test_index_build_is_bit_identical_to_prepare():
    results = []
    for spec in INDEX_SPECS:
        for causal in (True, False):
            for T in (1, 63, 64, 1000, 2048, 5000, 40000):
                for blocks in ((64, 64), (128, 64)):
                    what = f"index {spec} causal={causal} T={T} blocks={blocks}"
                    try:
                        g = torch.Generator(DEVICE).manual_seed(T)
                        q, k = (torch.randn((2, 3, T, 64), generator=g, device=DEVICE) for _ in range(2))
                        attn = ts.compile(spec, causal=causal)
                        dec = attn.decide(q, k, generator=g)
                        program = ir.lower(spec, causal=causal, block_q=blocks[0], block_k=blocks[1])
                        group = program.groups[0]
                        heads = (0, 1, 2)
                        kw = dict(batch=2, seqlen=T, device=DEVICE)
                        want = ir.prepare_group(program, group, heads, dec, heads=3, **kw)
                        got = cindex.build_group(program, group, heads, dec, ir.check_inputs(q, k, k))
                        results.append(_compare(what, got, want))
                    except Exception as e:  # noqa: BLE001
                        results.append(_line(False, what, f"{type(e).__name__}: {e}"))
    _report(results)


def _compare(what, got, want):
    """A report line: every index tensor of ``got`` equal to ``want``'s, or which differ."""
    bad = [f for f in FIELDS if not _same(getattr(got, f), getattr(want, f))]
    return _line(not bad, what, f"differs in {bad}" if bad else "all tensors equal")


def _same(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


def test_lsh_in_the_kernel_agrees_with_the_criterion():
    results = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for buckets in (2, 7, 16, 64):
            what = f"lsh buckets={buckets} {str(dtype)[6:]}"
            try:
                g = torch.Generator(DEVICE).manual_seed(buckets)
                q, k = (torch.randn((2, 4, 4096, 128), generator=g, device=DEVICE, dtype=dtype) for _ in range(2))
                want_q, want_k = get_criterion("lsh")(q, k, buckets=buckets, generator=torch.Generator(DEVICE).manual_seed(5))
                rot = lsh_draw(4, 128, buckets, DEVICE, generator=torch.Generator(DEVICE).manual_seed(5))
                got_q, got_k = cindex.lsh_buckets(q, k, rot, (0, 1, 2, 3), buckets)
                frac = float(((got_q != want_q).float().mean() + (got_k != want_k).float().mean()) / 2)
                limit = 1e-3 if dtype == torch.float32 else 2e-2
                results.append(_line(frac <= limit, what, f"{frac:.2e} of buckets differ (limit {limit:g})"))
            except Exception as e:  # noqa: BLE001
                results.append(_line(False, what, f"{type(e).__name__}: {e}"))
    _report(results)


def test_hashing_in_the_first_launch_then_sorting_equals_prepare():
    """LSH inside the index build (two launches in all) against prepare_group over the buckets
    the kernel hashed: GQA keys, with and without dropped tokens, several chunks."""
    results = []
    for spec in (ts.Hash(buckets=16), ts.Hybrid(parts=[ts.Hash(buckets=7), ts.QKDrop(keep=0.6)])):
        for causal in (True, False):
            for T in (100, 3000, 40000):
                what = f"hashing build {spec} causal={causal} T={T}"
                try:
                    g = torch.Generator(DEVICE).manual_seed(T)
                    q = torch.randn((2, 4, T, 128), generator=g, device=DEVICE, dtype=torch.bfloat16)
                    k = torch.randn((2, 2, T, 128), generator=g, device=DEVICE, dtype=torch.bfloat16)
                    dec = ts.compile(spec).decide(q, k.repeat_interleave(2, dim=1), generator=g)
                    keep = {"q_keep": dec.q_keep, "k_keep": dec.k_keep} if dec.q_keep is not None else {}
                    program = ir.lower(spec, causal=causal, block_q=64, block_k=64)
                    group = program.groups[0]
                    heads = (0, 1, 2, 3)
                    rot = lsh_draw(4, 128, group.buckets, DEVICE, generator=g)
                    kw = dict(batch=2, seqlen=T, device=DEVICE)
                    inputs = ir.check_inputs(q, k, k)
                    got = cindex.build_group(program, group, heads, ts.Decisions(**keep), inputs, rotations=rot)
                    qb, kb = cindex.lsh_buckets(q, k, rot, heads, group.buckets)
                    want_dec = ts.Decisions(q_bucket=qb.long(), k_bucket=kb.long(), **keep)
                    want = ir.prepare_group(program, group, heads, want_dec, heads=4, **kw)
                    results.append(_compare(what, got, want))
                except Exception as e:  # noqa: BLE001
                    results.append(_line(False, what, f"{type(e).__name__}: {e}"))
    _report(results)


# ---------------------------------------------------------------------------------------------
# compressed keys


def test_compressed_key_bytes_per_token():
    results = []
    for k in (4, 8, 16):
        for D in (64, 128, 256):
            T, H = 4096, 2
            q = torch.randn((1, H, T, D), device=DEVICE, dtype=torch.bfloat16)
            attn = ts.compile(ts.TopKFeatures(k=k), causal=True)
            dec = attn.decide(q, q)
            program = ir.lower(ts.TopKFeatures(k=k), causal=True, block_q=64, block_k=BN)
            g = ir.prepare_group(program, program.groups[0], (0, 1), dec, batch=1, heads=H, seqlen=T, device=DEVICE)
            k_vals = torch.gather(q, -1, g.k_support.long()).contiguous()
            ck = CudaKernels(D, torch.bfloat16).compress(g, g.k_support.to(torch.int16).contiguous(), k_vals)
            measured = ck.nbytes() / (H * T)
            model = compressed_key_bytes(k, D, torch.bfloat16)
            ok = abs(measured - model["compressed"]) < 1e-6
            results.append(_line(ok, f"k={k} D={D} bf16", f"{measured:.2f} B/token vs dense {model['dense']:.0f} "
                                                          f"({model['dense'] / measured:.1f}x smaller)"))
    _report(results)


def test_no_recompiles_for_fresh_decisions():
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=4), ts.TopKFeatures(k=8)]), backend="cupy")
    q, k, v = (torch.randn((1, 2, 700, 128), device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    attn(q, k, v).sum().backward()
    from tilesparse.backends.cupy.compile import module

    before = module.cache_info().currsize
    for step in range(5):
        attn(q, k, v, generator=torch.Generator(DEVICE).manual_seed(step)).sum().backward()
    assert module.cache_info().currsize == before
