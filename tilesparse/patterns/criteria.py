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

A backend may give ``lsh`` a device kernel (:func:`register_lsh_kernel`; the CuPy backend does:
the first launch of its index build). Where that kernel runs, ``lsh`` hashes with it instead of
a matmul and argmaxes; inside :func:`deferred_lsh` it only draws its rotation and returns
bucket buffers that a fused index build fills in its first launch (the same kernel, so the
same buckets). This module knows no kernels: it calls what was registered.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import is_fake

from . import decision_errors
from .decisions import check_decision_tensor

__all__ = [
    "Criterion",
    "CriterionFn",
    "Produces",
    "PendingHash",
    "check_output",
    "criterion",
    "deferred_lsh",
    "pending_hash",
    "register_lsh_kernel",
    "get_criterion",
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

    def __call__(self, q: Tensor, k: Tensor, /, *, generator=None, **fields) -> tuple[Tensor, Tensor]:
        out = self.fn(q, k, generator=generator, **fields)
        # value checks read the tensors back (a device sync): built-ins are correct by test; on
        # a GPU, within an op's decide step, the op checks a user criterion's ids on the device
        # instead (CompiledAttention._decide, decision_errors), so the call makes no sync
        values = not self.builtin and not decision_errors.ids_checked_by_caller(q.device)
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
    return (u[:nq] < keep).view(B, H, Tq), (u[nq:] < keep).view(B, H, k.shape[2])


@dataclass(eq=False)
class PendingHash:
    """An ``lsh`` call whose hashing waits for a fused index build: the inputs, the rotation
    (float32 holding values of the inputs' dtype) and the (B, H, T) int32 buffers to fill."""

    q: Tensor
    k: Tensor
    rotations: Tensor
    buckets: int
    q_bucket: Tensor
    k_bucket: Tensor
    done: bool = False

    def run(self) -> None:
        """Hash now (one kernel launch), unless a fused build did."""
        if not self.done:
            assert _LSH_KERNEL is not None, "a PendingHash exists only where a kernel is registered"
            _LSH_KERNEL[1](self.q, self.k, self.rotations, self.buckets, self.q_bucket, self.k_bucket)
            self.done = True


# (reasons(device_type, head_dim, buckets, tokens) -> list[str], hash_into(q, k, rot, buckets, qb, kb))
_LSH_KERNEL: tuple[Callable[[str, int, int, int], list[str]], Callable[..., None]] | None = None


def register_lsh_kernel(reasons: Callable[[str, int, int, int], list[str]], hash_into: Callable[..., None]) -> None:
    """Give the built-in ``lsh`` a device kernel: ``reasons(device_type, head_dim, buckets,
    tokens)`` says why it should not run for B x H x T = ``tokens`` (empty when it should);
    ``hash_into(q, k, rotations, buckets, q_out,
    k_out)`` fills the (B, H, T) int32 buffers with the criterion's buckets (rotations
    float32, (H, D, ceil(buckets / 2)), holding values of the inputs' dtype)."""
    global _LSH_KERNEL
    _LSH_KERNEL = (reasons, hash_into)


_DEFERRED: ContextVar[list[PendingHash] | None] = ContextVar("tilesparse_deferred_lsh", default=None)


@contextmanager
def deferred_lsh() -> Iterator[list[PendingHash]]:
    """Within: ``lsh`` calls on CUDA return unfilled buffers and append a :class:`PendingHash`
    to the yielded list; a fused index build takes them (``done``), the exit hashes the rest."""
    pending: list[PendingHash] = []
    token = _DEFERRED.set(pending)
    try:
        yield pending
    finally:
        _DEFERRED.reset(token)
        for p in pending:
            p.run()


def pending_hash(q_bucket: Tensor | None) -> PendingHash | None:
    """The unfilled :class:`PendingHash` whose q-side buffer is ``q_bucket``, if any (inside
    :func:`deferred_lsh`)."""
    for p in _DEFERRED.get() or ():
        if p.q_bucket is q_bucket and not p.done:
            return p
    return None


def _kernel_hashes(q: Tensor, buckets: int) -> bool:
    """Whether ``lsh`` hashes with the registered kernel here (never on the fake tensors a
    torch.compile trace runs the criterion on: they have no memory for a kernel)."""
    if _LSH_KERNEL is None or not q.is_cuda or is_fake(q):
        return False
    B, H, T, D = q.shape
    return not _LSH_KERNEL[0](q.device.type, D, buckets, B * H * T)


@criterion("lsh", produces="bucket", _builtin=True)
def lsh(q: Tensor, k: Tensor, /, *, buckets: int, generator: torch.Generator | None = None):
    """Reformer's angular LSH: per head a random rotation R (D, ceil(buckets/2)); a token's
    bucket is the argmax over [xR, -xR]. The same R hashes queries and keys of a head.

    With an odd bucket count the last negated direction, -xR[:, -1], is left out, so the
    argmax runs over exactly ``buckets`` directions (one bucket is then a little larger in
    expectation). ``buckets=1`` puts every token in bucket 0. The projection is rounded to the
    inputs' dtype; ties go to the earlier direction, as in an argmax over the concatenation.
    The projection is one batched matmul, or, on CUDA with cupy up to a size where the matmul
    is faster, one kernel that sums it in float32 in a fixed order (the same draw of R;
    near-ties can land on the other side of a rounding than a matmul would put them).
    """
    B, H, T, D = q.shape
    if buckets == 1:
        z = torch.zeros((B, H, T), dtype=torch.int32, device=q.device)
        return z, torch.zeros((B, H, k.shape[2]), dtype=torch.int32, device=q.device)
    half = math.ceil(buckets / 2)
    rot = torch.randn((H, D, half), generator=generator, device=q.device, dtype=torch.float32).to(q.dtype)
    # the kernel hashes equal-length q and k
    if q.shape[2] == k.shape[2] and _kernel_hashes(q, buckets):
        qb, kb = (torch.empty((B, H, T), dtype=torch.int32, device=q.device) for _ in range(2))
        pending = PendingHash(q, k, rot.float(), buckets, qb, kb)
        if (deferred := _DEFERRED.get()) is not None:
            deferred.append(pending)
        else:
            pending.run()
        return qb, kb
    return lsh_matmul(q, k, rot, buckets)


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
