"""Every ``.cu`` source of the CuPy backend compiles for sm_90 (the H200), so a syntax error
cannot land: with nvcc when it is on PATH (CI machines have it; ptxas then reports registers
and spills, checked against limits here), else with NVRTC; skipped, with the reason, when
neither exists. Also: the sizes the Python side assumes match the sources' constants, the
shared memory of the supported shapes fits a block, and without a GPU the backend reports
reasons instead of failing at import.

CPU only; ~20 s (nvcc compiles 36 template instances).
"""

import re

import pytest
import torch

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends import REGISTRY
from tilesparse.backends import cupy as cupy_backend
from tilesparse.backends.cupy import compile as cc
from tilesparse.backends.cupy import index, layout

SOURCES = sorted(p.name for p in cc.KERNEL_DIR.glob("*.cu"))
MAX_REGISTERS = 255  # 256 threads per block: 65,536 / 256
MAX_SPILL_BYTES = 128


def test_every_source_has_instances_to_check():
    assert SOURCES and set(SOURCES) == set(cc.check_instances)


def test_a_cuda_compiler_is_available():
    """CI must compile every .cu source, so a machine without a compiler fails here instead
    of letting a syntax error land."""
    assert cc.compiler_available() is not None, (
        "neither nvcc nor NVRTC is available: install the CUDA toolkit's nvcc, or "
        "pip install -e '.[nvrtc]' (nvidia-cuda-nvrtc)"
    )


@pytest.mark.parametrize("name", SOURCES)
def test_the_source_compiles_for_sm90(name):
    report = cc.compile_check(name)
    if report.compiler == "nvcc":
        assert len(report.registers) == len(cc.check_instances[name]), report.log
        too_many = {k: r for k, r in report.registers.items() if r > MAX_REGISTERS}
        spills = {k: s for k, s in report.spills.items() if s > MAX_SPILL_BYTES}
        assert not too_many and not spills, f"registers {too_many}, spills {spills}"


def test_a_syntax_error_is_caught(tmp_path, monkeypatch):
    (tmp_path / cc.COMMON).write_text(cc.source_file(cc.COMMON))
    (tmp_path / "bad.cu").write_text("__global__ void bad(int* x) { x[0] = undefined_name; }\n")
    monkeypatch.setattr(cc, "KERNEL_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="undefined_name"):
        cc.compile_check("bad.cu", ("bad",))


def _defines(name):
    text = cc.source(name)
    return {m.group(1): m.group(2) for m in re.finditer(r"^#define (\w+) (.+)$", text, re.M)}


def test_python_sizes_match_the_sources():
    sfa, idx = _defines("sfa.cu"), _defines("index.cu")
    assert (int(sfa["BM"]), int(sfa["BN"]), int(sfa["NT"])) == (layout.BM, layout.BN, layout.NT)
    assert sfa["KEY_SENTINEL"] == idx["KEY_SENTINEL"].split("//")[0].strip() == "(1 << 30)"
    assert ir.KEY_SENTINEL == 1 << 30
    bits = {k: int(sfa[k]) for k in ("P_CAUSAL", "P_STRICT", "P_SAME_BUCKET", "P_NOT_SELF")}
    assert bits == {"P_CAUSAL": layout.P_CAUSAL, "P_STRICT": layout.P_STRICT,
                    "P_SAME_BUCKET": layout.P_SAME_BUCKET, "P_NOT_SELF": layout.P_NOT_SELF}  # fmt: skip
    assert (int(idx["NT"]), int(idx["CHUNK"])) == (index.NT, index.CHUNK)


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("k", [4, 8, 16, 32])
def test_the_benchmarked_shapes_fit_in_shared_memory(D, k):
    for kernel in ("compress", "fwd", "dq", "dkdv"):
        assert layout.shared_bytes(kernel, D, k) <= cc.SHARED_LIMIT, (kernel, D, k)


def test_compressed_keys_take_fewer_bytes_than_dense():
    b = layout.compressed_key_bytes(8, 128, torch.bfloat16)
    assert b["dense"] == 256 and b["compressed"] == 8 * 4 + 2 * 129 / 64
    assert b["ratio"] > 7


def _group(spec):
    return ir.lower(spec, causal=True).groups[0]


def test_without_a_gpu_the_backend_gives_reasons():
    q = torch.randn(1, 2, 8, 64)
    inputs = ir.check_inputs(q, q, q)
    backend = REGISTRY["cupy"]
    reasons = backend.not_supported_reasons(_group(ts.TopKFeatures(k=8)), inputs)
    missing = [] if cupy_backend._HAVE_CUPY else ["cupy is not installed (pip install 'tilesparse[cupy]', i.e. cupy-cuda13x)"]
    assert reasons == ["device 'cpu' not in ('cuda',)", *missing]
    dense = backend.not_supported_reasons(_group(ts.Hash(buckets=4)), inputs)
    assert any("TopKFeatures groups only" in r for r in dense)
    with pytest.raises(ts.planner.NoBackendError, match="cupy: device 'cpu'"):
        ts.compile(ts.TopKFeatures(k=8), backend="cupy")(q, q, q)


def test_a_missing_cupy_is_a_reason(monkeypatch):
    monkeypatch.setattr(cupy_backend, "_HAVE_CUPY", False)
    q = torch.randn(1, 1, 8, 256)
    reasons = REGISTRY["cupy"].not_supported_reasons(_group(ts.TopKFeatures(k=64)), ir.check_inputs(q, q, q))
    assert any("cupy is not installed" in r for r in reasons)
    assert any("bytes of shared memory" in r for r in reasons), "k=64 at D=256 does not fit a block"


@pytest.mark.skipif(cc.shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize(("name", "instance"), [("index.cu", "index_scatter"), ("index.cu", "index_count<F16>"),
                                                ("sfa.cu", "sfa_bwd_dkdv<F32, 64>")])  # fmt: skip
def test_the_nvcc_fallback_finds_each_instance_entry(tmp_path, name, instance):
    """Without NVRTC the backend builds one instance per cubin and loads it by its mangled name."""
    report = cc._nvcc(name, (instance,), cc.ARCH, cubin=tmp_path / "one.cubin")
    entry = cc.entry_name(report, instance)
    assert entry.startswith("_Z") and (tmp_path / "one.cubin").stat().st_size > 0
