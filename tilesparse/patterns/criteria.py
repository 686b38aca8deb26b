"""Sparsity criteria: the functions that turn q and k into per-token decisions.

A criterion is a callable ``fn(q, k, /, *, generator=None, **fields)``. ``q`` is (B, H, Tq, D);
``k`` is expanded per query head to (B, H, Tk, D), Tq <= Tk (equal in training). The spec's fields arrive as keywords
(``keep=``, ``buckets=``, ``k=``), so name the two tensors positionally (``/``): a support
criterion receives ``k=`` as the number of features. It returns ``(q_side, k_side)``:

- ``produces="keep"``: (B, H, Tq) and (B, H, Tk) bool tensors;
- ``produces="bucket"``: (B, H, Tq) and (B, H, Tk) integer tensors with values in [0, buckets);
- ``produces="support"``: (B, H, Tq, k) and (B, H, Tk, k) integer tensors of distinct feature
  ids in [0, D).

A criterion that decides each token from that token alone (``lsh`` with a given rotation,
``topk_abs``) gives a token the same decision however the sequence is chunked; a random one
(``bernoulli``) draws per call, so chunked decoding that must equal a whole-sequence run passes
the decisions (see ``tilesparse.KVCache``).

Built-ins: ``bernoulli`` (keep), ``lsh`` (bucket, Reformer's random rotations) and
``topk_abs`` (support). :func:`check_output` holds every criterion, built-in or not, to that
contract.

Criteria are pure functions of (q, k) and the generator: this module knows no kernels.
``lsh`` is its two parts, :func:`lsh_rotation` (the draw, :func:`lsh_draw`, rounded to the
inputs' dtype) and :func:`lsh_matmul` (the hashing): where a compiled op's plan gives the
hashing to an index builder's kernel (alone, or inside its first launch), the op draws with
:func:`lsh_draw` and the builder rounds the draw and hashes (``tilesparse.decide``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor

from .decisions import check_decision_tensor

__all__ = [
    "Criterion",
    "CriterionFn",
    "Produces",
    "check_output",
    "criterion",
    "get_criterion",
    "lsh_draw",
    "lsh_matmul",
    "lsh_rotation",
    "registered",
]

Produces = Literal["keep", "bucket", "support"]
PRODUCES: tuple[str, ...] = ("keep", "bucket", "support")


class CriterionFn(Protocol):
    """What ``@tilesparse.criterion`` accepts."""

    def __call__(
        self, q: Tensor, k: Tensor, /, *, generator: torch.Generator | None = None, **fields
    ) -> tuple[Tensor, Tensor]: ...


@dataclass(frozen=True, slots=True)
class Criterion:
    """A registered criterion: its name, what it produces, and the function."""

    name: str
    produces: Produces
    fn: CriterionFn
    builtin: bool = False

    def __call__(
        self, q: Tensor, k: Tensor, /, *, generator=None, check_ids: bool = True, **fields
    ) -> tuple[Tensor, Tensor]:
        out = self.fn(q, k, generator=generator, **fields)
        # value checks read the tensors back (a device sync): built-ins are correct by test;
        # ``check_ids=False`` leaves a user criterion's ids to the caller (an op's decide step
        # on a GPU checks them on the device: CompiledAttention._decide, decision_errors)
        values = not self.builtin and check_ids
        return check_output(self, out, q, fields, values=values, k_len=k.shape[2])


_REGISTRY: dict[str, Criterion] = {}


def criterion(
    name: str, *, produces: Produces, replace: bool = False, _builtin: bool = False
) -> Callable[[CriterionFn], CriterionFn]:
    """Register ``fn`` under ``name``; specs then name it, e.g. ``QKDrop(criterion=name)``.

    ``produces`` says which spec can use it: "keep" (QKDrop), "bucket" (Hash) or "support"
    (TopKFeatures). Registering a taken name raises unless ``replace=True``.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"criterion name must be a non-empty string, got {name!r}")
    if produces not in PRODUCES:
        raise ValueError(f"criterion {name!r}: produces must be one of {PRODUCES}, got {produces!r}")

    def register(fn: CriterionFn) -> CriterionFn:
        if not callable(fn):
            raise TypeError(f"criterion {name!r} must decorate a callable, got {type(fn).__name__}")
        if name in _REGISTRY and not replace:
            raise ValueError(
                f"criterion {name!r} is already registered (produces {_REGISTRY[name].produces!r}); "
                "pick another name or pass replace=True"
            )
        _REGISTRY[name] = Criterion(name, produces, fn, builtin=_builtin)
        return fn

    return register


def get_criterion(name: str) -> Criterion:
    """The registered criterion called ``name``; the error lists the registered names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown criterion {name!r}; registered: {sorted(_REGISTRY)}") from None


def registered(produces: Produces | None = None) -> list[str]:
    """Names of the registered criteria, optionally only those producing ``produces``."""
    return sorted(n for n, c in _REGISTRY.items() if produces is None or c.produces == produces)


def check_output(
    crit: Criterion, out: object, q: Tensor, fields: dict, *, values: bool = True, k_len: int | None = None
) -> tuple[Tensor, Tensor]:
    """Check a criterion's return value against its contract (types and shapes; value ranges
    too when ``values``); raise naming what is off."""
    where = f"criterion {crit.name!r} (produces {crit.produces!r})"
    if not (isinstance(out, tuple | list) and len(out) == 2):
        raise TypeError(f"{where} must return a pair (q_side, k_side) of tensors, got {type(out).__name__}")
    B, H, T, D = q.shape
    hi = fields["buckets"] if crit.produces == "bucket" else D
    for side, t, n in zip(("q_side", "k_side"), out, (T, T if k_len is None else k_len), strict=True):
        shape = (B, H, n, fields["k"]) if crit.produces == "support" else (B, H, n)
        check_decision_tensor(
            f"{where}: {side}", t, kind=crit.produces, shape=shape, device=q.device, hi=hi, values=values
        )
    return out[0], out[1]


# ---------------------------------------------------------------------------------------------
# Built-ins


@criterion("bernoulli", produces="keep", _builtin=True)
def bernoulli(q: Tensor, k: Tensor, /, *, keep: float, generator: torch.Generator | None = None):
    """Keep each (b, h, token) with probability ``keep``, for queries and keys independently
    (queries drawn first, then keys)."""
    B, H, Tq, _ = q.shape
    nq = B * H * Tq
    u = torch.rand((nq + B * H * k.shape[2],), generator=generator, device=q.device)
    # two comparisons, not one sliced in two: a custom op's outputs may not alias each other
    return (u[:nq] < keep).view(B, H, Tq), (u[nq:] < keep).view(B, H, k.shape[2])


@criterion("lsh", produces="bucket", _builtin=True)
def lsh(q: Tensor, k: Tensor, /, *, buckets: int, generator: torch.Generator | None = None):
    """Reformer's angular LSH: per head a random rotation R (D, ceil(buckets/2)); a token's
    bucket is the argmax over [xR, -xR]. The same R hashes queries and keys of a head.

    With an odd bucket count the last negated direction, -xR[:, -1], is left out, so the
    argmax runs over exactly ``buckets`` directions (one bucket is then a little larger in
    expectation). ``buckets=1`` puts every token in bucket 0. The projection is rounded to the
    inputs' dtype; ties go to the earlier direction, as in an argmax over the concatenation.
    The projection is one batched matmul per side (:func:`lsh_matmul`); a compiled op may
    give it to an index builder's kernel instead, which sums it in float32 in a fixed order
    (the same draw of R; near-ties can land on the other side of a rounding than a matmul
    would put them).
    """
    B, H, T, D = q.shape
    if buckets == 1:
        z = torch.zeros((B, H, T), dtype=torch.int32, device=q.device)
        return z, torch.zeros((B, H, k.shape[2]), dtype=torch.int32, device=q.device)
    return lsh_matmul(q, k, lsh_rotation(H, D, buckets, q.dtype, q.device, generator), buckets)


def lsh_draw(heads: int, head_dim: int, buckets: int, device, generator=None) -> Tensor:
    """``lsh``'s draw before its rounding: (H, D, ceil(buckets / 2)) float32 normal values (one
    generator gives every dtype the same rotation up to rounding). The index builders' hashing
    kernels take it as it is and round each value to the inputs' dtype themselves."""
    half = math.ceil(buckets / 2)
    return torch.randn((heads, head_dim, half), generator=generator, device=device, dtype=torch.float32)


def lsh_rotation(heads: int, head_dim: int, buckets: int, dtype: torch.dtype, device, generator=None) -> Tensor:
    """``lsh``'s rotation: :func:`lsh_draw` rounded to ``dtype`` (to nearest, ties to even)."""
    return lsh_draw(heads, head_dim, buckets, device, generator).to(dtype)


def lsh_matmul(q: Tensor, k: Tensor, rot: Tensor, buckets: int) -> tuple[Tensor, Tensor]:
    """``lsh``'s hashing as torch ops: one batched matmul per side, argmax over [xR, -xR]."""
    half = rot.shape[-1]
    negated = buckets - half  # directions -xR[:, :negated] take part

    def hash_(x: Tensor) -> Tensor:
        proj = torch.matmul(x, rot)  # (B, H, T, half), batched over heads
        top, arg = proj.max(dim=-1)
        low, arg_low = proj[..., :negated].min(dim=-1)
        return torch.where(top >= -low, arg, half + arg_low).to(torch.int32)

    return hash_(q), hash_(k)


@criterion("topk_abs", produces="support", _builtin=True)
def topk_abs(q: Tensor, k_: Tensor, /, *, k: int, generator: torch.Generator | None = None):
    """The ``k`` features of largest |x| per token, ties broken by the lowest feature id;
    ids returned in increasing order."""

    def support(x: Tensor) -> Tensor:
        # descending stable sort keeps equal magnitudes in id order: lowest id wins ties
        order = torch.sort(x.abs(), dim=-1, descending=True, stable=True).indices[..., :k]
        return order.sort(dim=-1).values.to(torch.int32)

    return support(q), support(k_)
