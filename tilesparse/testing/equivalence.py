"""``assert_equivalent``: a compiled op against its own reference, outputs and gradients.

The reference (:meth:`CompiledAttention.reference`) runs in float64 on the same inputs and
decisions, so a difference is the op's rounding or the op's bug. Tolerances are per input
dtype, from the backends' ``ERROR_ATOL`` (fp32 1e-4, fp16 4e-3, bf16 3e-2; the loosest of
the backends the plan uses), relative to the reference's largest magnitude. Tested in
``tests/testing/test_equivalence.py``, which plants wrong ops and checks that each is caught.

Known limits: the comparison is max-norm, so a bug that moves one element by less than the
tolerance passes; the reference is O(T^2) memory, so keep T to a few thousand.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..backends.base import Backend
from ..patterns import Decisions

__all__ = ["assert_equivalent", "tolerance"]

# a tensor's tolerance scale never drops below this fraction of the largest compared
# reference tensor. dq and dk come from dO.v - dO.out, which cancels (to ~0 at T = 1): their
# rounding error is relative to those terms, of the size of out and dv, not to the result.
# Measured on correct float16/bfloat16 ops (torch SDPA on CPU, 400 random cases): with a
# floor of 0.01 the worst dq/dk error reached 1.25x the tolerance, with 0.25 under 0.5x
SCALE_FLOOR = 0.25


def tolerance(
    attn: Any, dtype: torch.dtype, q: Tensor | None = None, k: Tensor | None = None, v: Tensor | None = None
) -> float:
    """The atol (relative to the reference's magnitude) for ``dtype``: the loosest
    ``ERROR_ATOL`` among the backends ``attn`` plans for q, k, v (Backend's default otherwise)."""
    backends: list[Any] = [Backend]
    if q is not None and hasattr(attn, "plan"):
        backends = [a.backend for a in attn.plan(q, k, v).assignments] or backends
    try:
        return max(b.ERROR_ATOL[dtype] for b in backends)
    except KeyError:
        raise ValueError(f"no ERROR_ATOL for dtype {dtype}; pass atol= explicitly") from None


def assert_equivalent(
    attn: Any,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    decisions: Decisions | None = None,
    grads: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 0,
    key_padding_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
) -> dict[str, float]:
    """Check ``attn(q, k, v, decisions=)`` against ``attn.reference``; raise AssertionError
    naming each tensor that differs, its max error, where, and the tolerance.

    Compares the output and, with ``grads``, the gradients of q, k and v under a random
    upstream gradient (from ``seed``). ``decisions=None`` draws them once with
    ``attn.decide`` (seeded) and gives both sides the same. Element (i) passes when
    ``|got - ref| <= atol * scale + rtol * |ref|``, ``scale`` the largest |ref| of that tensor
    (floored at ``SCALE_FLOOR`` times the largest of all compared); ``atol`` defaults to the
    backends' ``ERROR_ATOL`` for q's dtype, ``rtol`` to 0. Fails on NaN or inf, on a wrong
    dtype or shape, and on a gradient that is missing where the reference's is not zero.
    Returns the max absolute error of each compared tensor. ``key_padding_mask`` and
    ``document_ids`` go to both sides (the op's rewrite against the reference's own meaning).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if decisions is None and attn.spec.decision_fields:
        decisions = attn.decide(q, k, generator=torch.Generator(q.device).manual_seed(seed))
    atol = tolerance(attn, q.dtype, q, k, v) if atol is None else float(atol)
    rtol = 0.0 if rtol is None else float(rtol)

    leaves = [t.detach().clone().requires_grad_(grads) for t in (q, k, v)]
    ref_leaves = [t.detach().clone().requires_grad_(grads) for t in (q, k, v)]
    masks = {n: t for n, t in (("key_padding_mask", key_padding_mask), ("document_ids", document_ids)) if t is not None}
    out = attn(*leaves, decisions=decisions, **masks)
    ref = attn.reference(*ref_leaves, decisions=decisions, precision=torch.float64, **masks)

    got: dict[str, Tensor | None] = {"out": out}
    want: dict[str, Tensor] = {"out": ref.detach()}
    problems = _form("out", out, q)
    if grads and not problems:
        g = torch.Generator(q.device).manual_seed(seed + 1)
        # exactly representable in the op's dtype: both sides see the same upstream gradient
        upstream = torch.randn(ref.shape, generator=g, device=q.device).to(out.dtype).to(torch.float64)
        want.update(zip(("grad q", "grad k", "grad v"), torch.autograd.grad(ref, ref_leaves, upstream), strict=True))
        if out.grad_fn is None:
            problems.append("out has no grad_fn: the op is not differentiable, every gradient is missing")
            got.update({name: None for name in ("grad q", "grad k", "grad v")})
        else:
            op_grads = torch.autograd.grad(out, leaves, upstream.to(out.dtype), allow_unused=True)
            got.update(zip(("grad q", "grad k", "grad v"), op_grads, strict=True))
        for name, t in zip(("grad q", "grad k", "grad v"), (q, k, v), strict=True):
            if got[name] is not None:
                problems += _form(name, got[name], t)

    largest = max(float(r.abs().max()) if r.numel() else 0.0 for r in want.values())
    errors: dict[str, float] = {}
    if not problems:
        for name, r in want.items():
            msg, err = _compare(name, got[name], r, atol=atol, rtol=rtol, floor=SCALE_FLOOR * largest)
            errors[name] = err
            if msg:
                problems.append(msg)
    if problems:
        context = (
            f"  {attn!r}; q {tuple(q.shape)} k/v {tuple(k.shape)} {str(q.dtype).removeprefix('torch.')}"
            f"{'' if decisions is None else f'; {decisions!r}'}"
        )
        raise AssertionError("op differs from its reference:\n" + "\n".join(problems) + "\n" + context)
    return errors


def _form(name: str, got: Tensor, like: Tensor) -> list[str]:
    """Shape and dtype of ``got`` against the input it stands for."""
    out = []
    if tuple(got.shape) != tuple(like.shape):
        out.append(f"{name}: shape {tuple(got.shape)}, expected {tuple(like.shape)}")
    if got.dtype != like.dtype:
        out.append(f"{name}: dtype {got.dtype}, expected the inputs' {like.dtype}")
    return out


def _compare(
    name: str, got: Tensor | None, ref: Tensor, *, atol: float, rtol: float, floor: float
) -> tuple[str, float]:
    """('' or a failure message, max abs error) for one tensor."""
    scale = max(float(ref.abs().max()) if ref.numel() else 0.0, floor)
    if got is None:
        if not bool(ref.any()):
            return "", 0.0
        missing = (
            f"{name}: missing (None, no path from the output) but the reference's is nonzero "
            f"(max |ref| {float(ref.abs().max()):.4g})"
        )
        return missing, float("inf")
    if not bool(torch.isfinite(ref).all()):
        return f"{name}: the reference holds NaN/inf (non-finite inputs?); nothing to compare against", float("nan")
    g = got.detach().to(torch.float64)
    if n_bad := int((~torch.isfinite(g)).sum()):
        where = tuple(int(i) for i in torch.nonzero(~torch.isfinite(g))[0])
        return f"{name}: {n_bad} NaN/inf elements, first at {where} (got {float(g[where])})", float("inf")
    err = (g - ref).abs()
    allowed = atol * scale + rtol * ref.abs()
    over = err > allowed
    max_err = float(err.max()) if err.numel() else 0.0
    if not bool(over.any()):
        return "", max_err
    excess = err - allowed
    where = tuple(int(i) for i in torch.nonzero(excess == excess.max())[0])  # the worst violation
    message = (
        f"{name}: max |error| {max_err:.4g}; worst at {where}: got {float(g[where]):.6g}, reference "
        f"{float(ref[where]):.6g}, tolerance there {float(allowed[where]):.3g} "
        f"(atol {atol:g} x scale {scale:.4g} + rtol {rtol:g} x |ref|); "
        f"{int(over.sum())} of {over.numel()} elements over"
    )
    return message, max_err
