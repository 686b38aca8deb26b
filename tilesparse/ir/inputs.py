"""The one inputs object every backend receives: q, k, v validated once, sizes derived."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["SUPPORTED_DTYPES", "AttentionInputs", "check_inputs", "check_scale", "check_tensor_args", "tensor_size"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def tensor_size(field: str, dim: int, doc: str | None = None) -> property:
    """A read-only property: the size of dimension ``dim`` of the tensor field ``field``, read
    off the tensor each time, so that a size is never stored beside the tensor it describes."""
    return property(lambda self: getattr(self, field).shape[dim], doc=doc)


@dataclass(frozen=True, eq=False)
class AttentionInputs:
    """q (B, H, Tq, D); k, v (B, Hkv, Tk, D) with H % Hkv == 0 and Tq <= Tk, as in
    F.scaled_dot_product_attention; query i sits at absolute position Tk - Tq + i (bottom-right,
    as FlashAttention), so Tq == Tk is the training case and Tq < Tk a prefill or decode step
    against earlier keys."""

    q: Tensor
    k: Tensor
    v: Tensor
    scale: float

    batch = tensor_size("q", 0)
    heads = tensor_size("q", 1)
    kv_heads = tensor_size("k", 1)
    q_len = tensor_size("q", 2, "Tq, the query rows.")
    k_len = tensor_size("k", 2, "Tk, the key rows: the sequence the queries are the last Tq positions of.")
    seqlen = tensor_size("k", 2, "The sequence length: Tk (the keys); equal to :attr:`q_len` in training.")
    head_dim = tensor_size("q", 3)

    @property
    def group(self) -> int:
        """Query heads per kv head (1 without grouped-query attention)."""
        return self.heads // self.kv_heads

    @property
    def q_offset(self) -> int:
        """Tk - Tq: the absolute position of query row 0."""
        return self.k.shape[2] - self.q.shape[2]

    @property
    def dtype(self) -> torch.dtype:
        return self.q.dtype

    @property
    def device(self) -> torch.device:
        return self.q.device

    @property
    def requires_grad(self) -> bool:
        return torch.is_grad_enabled() and any(t.requires_grad for t in (self.q, self.k, self.v))

    def k_per_query_head(self) -> Tensor:
        """k expanded to (B, H, Tk, D): a copy when grouped-query attention is used."""
        return _expand(self.k, self.group)

    def v_per_query_head(self) -> Tensor:
        return _expand(self.v, self.group)


def _expand(t: Tensor, group: int) -> Tensor:
    return t if group == 1 else t.repeat_interleave(group, dim=1)


def check_tensor_args(q: object, k: object, v: object) -> None:
    """q, k, v are tensors with storage (not lists, not on the meta device): the cheap first
    check of a call, before anything reads their device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type == "meta":
        raise ValueError("q, k, v are on the meta device, which holds no data; expected cpu or cuda tensors")


def check_scale(scale: object) -> float | None:
    """``scale`` as a float: None (1/sqrt(D)) or a finite number > 0; bools are refused."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale < float("inf"):
        raise ValueError(f"scale must be None or a finite number > 0, got {scale!r}")
    return float(scale)


def check_inputs(q: object, k: object, v: object, *, scale: float | None = None) -> AttentionInputs:
    """Validate q, k, v; every error names the argument, the value received and what is expected."""
    check_tensor_args(q, k, v)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, heads, T, D), got shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            names = ", ".join(str(d).removeprefix("torch.") for d in SUPPORTED_DTYPES)
            raise TypeError(f"{name} has dtype {t.dtype}; supported: {names}")
    assert isinstance(q, Tensor) and isinstance(k, Tensor) and isinstance(v, Tensor)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    B, H, T, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}")
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(
            f"k must be (B={B}, Hkv, Tk, D={D}) to match q {tuple(q.shape)}, got {tuple(k.shape)}"
        )
    if k.shape[2] < T:
        raise ValueError(
            f"q has Tq={T} rows but k has Tk={k.shape[2]}: Tq must be <= Tk (query i sits at absolute "
            f"position Tk - Tq + i); pass the keys of every earlier position too"
        )
    Hkv = k.shape[1]
    if Hkv == 0 or H % Hkv:
        raise ValueError(f"q's {H} heads must be a multiple of k's {Hkv} heads (grouped-query attention)")
    if D % 8 or not 8 <= D <= 256:
        raise ValueError(f"head dim D must be a multiple of 8 in [8, 256], got {D}")
    if T < 1 or B < 1 or H < 1:
        raise ValueError(f"q must have B, H, T >= 1, got shape {tuple(q.shape)}")
    scale = check_scale(scale)
    return AttentionInputs(q, k, v, D**-0.5 if scale is None else scale)
