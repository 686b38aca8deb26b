"""The CuPy backend: CUDA kernels as ``.cu`` sources compiled by NVRTC through cupy.

- ``kernels/sfa.cu``: FlashSFA-style feature-intersection attention for TopKFeatures (path 2):
  queries CSR-like (row -> k feature ids, values), keys compressed per key tile into a
  feature-major CSC with 16-bit ids, scores from the support overlaps inside a tile, the
  online softmax over the IR's tile ranges, forward and backward (dq~ and dk~ only on kept
  entries, dV dense); causal and every token-sparse layout of the IR.
- ``kernels/index.cu``: the CuPy index builder (``builder.py``): any head group's index in
  two launches (LSH buckets optionally, a per-head counting sort by bucket, the block ranges),
  equal to ``tilesparse.ir.prepare_group``; the planner may pick it to build another backend's
  index, and to hash the ``lsh`` criterion's buckets (its first launch alone, or fused into
  the build) where that is faster than the criterion's torch ops.

It runs on CUDA only. Without cupy or a GPU the backend reports why (never an import error).
CI compiles every ``.cu`` for sm_90 (tests/backends/cupy/test_compile.py), runs the kernels on
the CPU in a CUDA emulator against the reference and ``prepare_group``
(tests/backends/cupy/test_emulated_kernels.py), and checks the kernels' torch models
(``model.py``, ``index_model.py``). Tested on the H200 in tests/gpu/test_cupy_gpu.py.
"""

from __future__ import annotations

import functools
import importlib.util

from torch import Tensor

from ...ir import AttentionInputs, FeatureDotScore, HeadGroup, PreparedGroup
from ..base import Backend, register
from ..builder import register_builder
from .builder import CupyBuilder
from .compile import SHARED_LIMIT
from .layout import BM, BN, compressed_key_bytes, shared_bytes

__all__ = ["CupyBackend", "CupyBuilder", "compressed_key_bytes", "cupy_reasons"]

_HAVE_CUPY = importlib.util.find_spec("cupy") is not None

# H200 throughputs the cost estimate uses (achieved, not peak): CUDA-core fp32 FMA work of the
# feature-intersection kernel, tensor-core work of dense tiles (path 1 / flash)
_CUDA_CORE_FLOPS = 25e12
_TENSOR_CORE_FLOPS = 350e12


class CupyBackend(Backend):
    """FlashSFA-style feature-intersection attention (TopKFeatures only), CuPy RawKernels."""

    NAME = "cupy"
    SUPPORTED_DEVICES = ("cuda",)
    # gather, attend and scatter are one kernel (TopKFeatures groups only)
    STAGES = ("gather", "attend", "scatter")
    FUSIONS = (("gather", "attend", "scatter"),)
    INDEX_BUILDER = "cupy"

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        reasons = []
        if not isinstance(group.score, FeatureDotScore):
            reasons.append("score is the dense dot: the feature-intersection kernel runs TopKFeatures groups only")
        reasons += cupy_reasons(inputs.device.type)
        reasons += _length_reasons(inputs)
        if isinstance(group.score, FeatureDotScore):
            need = max(shared_bytes(kern, inputs.head_dim, group.score.k) for kern in ("fwd", "dq", "dkdv"))
            if need > SHARED_LIMIT:
                reasons.append(
                    f"k={group.score.k} at D={inputs.head_dim} needs {need} bytes of shared memory per block "
                    f"> {SHARED_LIMIT}; use a smaller k"
                )
        return reasons

    def blocks(self, inputs: AttentionInputs) -> tuple[int, int]:
        return BM, BN

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        from .op import feature_attention

        out = feature_attention(inputs.q, inputs.k, inputs.v, g, inputs.scale)
        return out.to(inputs.dtype)

    @staticmethod
    def estimate_seconds(k: int, head_dim: int, tiles_elements: float, *, backward: bool) -> dict[str, float]:
        """A rough time of the attend stage on an H200 for ``tiles_elements`` visited score
        elements (B * H * visited tiles * 64 * 64): path 2 (this kernel) against path 1 (dense
        tiles on tensor cores). Path 2 does k * k / D multiply-adds per element for the
        overlaps but still D for P.V (and 3 D more in the backward), on CUDA cores; path 1
        does 2 D (6 D with the backward) on tensor cores. So path 2 pays only when k * k / D
        is small *and* the CUDA-core P.V is cheaper than tensor-core dense tiles: never on an
        H200, whose tensor cores are ~14x its CUDA cores."""
        overlap = k * k / head_dim
        p2 = 2 * tiles_elements * (overlap + head_dim) * (3 if backward else 1) / _CUDA_CORE_FLOPS
        p1 = 2 * tiles_elements * 2 * head_dim * (3 if backward else 1) / _TENSOR_CORE_FLOPS
        return {"path2_cupy": p2, "path1_dense_tiles": p1}


def _length_reasons(inputs: AttentionInputs) -> list[str]:
    """The kernels take one length for queries and keys: Tq < Tk is refused."""
    if inputs.q_len == inputs.k_len:
        return []
    return [f"queries shorter than keys (Tq={inputs.q_len} < Tk={inputs.k_len}): the CuPy kernels need Tq == Tk"]


def cupy_reasons(device_type: str) -> list[str]:
    """Why no CuPy kernel can run on ``device_type`` (empty when one can)."""
    if not _HAVE_CUPY:
        return ["cupy is not installed (pip install 'tilesparse[cupy]', i.e. cupy-cuda13x)"]
    if device_type == "cuda" and not _cupy_sees_gpu():
        return ["cupy finds no CUDA device (cupy.is_available() is False)"]
    return []


@functools.lru_cache(maxsize=1)
def _cupy_sees_gpu() -> bool:
    try:
        import cupy

        return bool(cupy.is_available())
    except Exception:  # noqa: BLE001 - a broken CUDA install is "no GPU" here
        return False


register(CupyBackend())
register_builder(CupyBuilder())
