"""Pattern specs: pydantic models users declare, frozen and validated, JSON round-trip exact.

Every spec has a meaning as one mask function of (b, h, i, j) over its decisions, in the style
of FlexAttention's ``mask_mod``: :meth:`Spec.mask_mod` returns it, and masked dense attention
with it applied (plus causality, a compile option) is the definition of correct. TopKFeatures
changes the score instead of the mask: :meth:`Spec.supports` says which features each side
keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, ClassVar, Literal, Union

import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationInfo,
    field_validator,
)
from torch import Tensor

from .criteria import get_criterion
from .decisions import Decisions

__all__ = [
    "Dense",
    "Hash",
    "Hybrid",
    "MaskMod",
    "PerHead",
    "QKDrop",
    "Spec",
    "TopKFeatures",
    "and_masks",
    "parse_spec",
]

# fields take their values as given: no coercion (Hash(buckets=True) is not one bucket, and
# attend_self="no" is not True); a float field accepts an int
StrictFloat = Annotated[float, Strict()]


def _in_range(lo: float, hi: float, meaning: str = "", *, above_lo: bool = False) -> AfterValidator:
    """A field's range, checked after its type: ``lo <= v <= hi`` (``lo < v`` with ``above_lo``),
    else an error naming the field, the range, what the field means and the value received."""
    interval = f"{'(' if above_lo else '['}{lo}, {hi}]"

    def check(v, info: ValidationInfo):
        if not ((lo < v if above_lo else lo <= v) and v <= hi):
            raise ValueError(f"{info.field_name} must be in {interval}{meaning}, got {v}")
        return v

    return AfterValidator(check)


MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
"""(b, h, i, j) -> bool, over broadcastable index tensors: True keeps element (i, j)."""


def and_masks(*mods: MaskMod | None) -> MaskMod | None:
    """The conjunction of mask functions; ``None`` stands for "keep everything"."""
    live = [m for m in mods if m is not None]
    if not live:
        return None

    def mod(b, h, i, j):
        out = live[0](b, h, i, j)
        for m in live[1:]:
            out = out & m(b, h, i, j)
        return out

    return mod


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @property
    def decision_fields(self) -> frozenset[str]:
        """The :class:`Decisions` fields this spec reads."""
        return frozenset()

    def mask_mod(self, dec: Decisions, q_offset: int = 0) -> MaskMod | None:
        """The element mask over ``dec`` (causality not included); None keeps everything.

        ``i`` indexes the query rows of ``dec`` (absolute position ``i + q_offset``: Tk - Tq
        when the queries are the last Tq of Tk positions), ``j`` the keys."""
        return None

    def supports(self, dec: Decisions) -> tuple[Tensor, Tensor] | None:
        """(q_support, k_support) feature ids when the score uses only kept features."""
        return None

    def dense_heads_mask(self, heads: int) -> Tensor | None:
        """(H,) bool, True for heads computed dense whatever the decisions say."""
        return None

    def decision_parts(self) -> tuple[_CriterionSpec, ...]:
        """The specs whose criteria make this spec's decisions, in the order they draw."""
        return ()

    def decide(
        self, q: Tensor, k: Tensor, *, generator: torch.Generator | None = None, check_ids: bool = True
    ) -> Decisions:
        """Run the spec's criteria on q (B, H, Tq, D) and k expanded to (B, H, Tk, D);
        ``check_ids=False``: a user criterion's ids are left to the caller to check."""
        out = Decisions()
        for p in self.decision_parts():
            out = out.merge(p.decide(q, k, generator=generator, check_ids=check_ids))
        return out

    def __str__(self) -> str:
        """Compact form: the class and the fields that differ from their defaults."""

        def show(v) -> str:
            if isinstance(v, tuple):
                return "[" + ", ".join(show(x) for x in v) + "]"
            return str(v) if isinstance(v, _Spec) else repr(v)

        fields = type(self).model_fields
        args = ", ".join(
            f"{n}={show(getattr(self, n))}"
            for n in fields
            if n != "kind" and getattr(self, n) != fields[n].default
        )
        return f"{type(self).__name__}({args})"


class _CriterionSpec(_Spec):
    """A spec whose decisions come from one criterion producing ``produces``; the criterion
    receives the fields named in ``criterion_fields`` as keywords."""

    produces: ClassVar[str]
    criterion_fields: ClassVar[tuple[str, ...]]

    @field_validator("criterion", check_fields=False)
    @classmethod
    def _known_criterion(cls, name: str) -> str:
        try:
            crit = get_criterion(name)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        want = cls.produces
        if crit.produces != want:
            raise ValueError(
                f"criterion {name!r} produces {crit.produces!r} but {cls.__name__} needs one "
                f"producing {want!r}"
            )
        return name

    @property
    def decision_fields(self) -> frozenset[str]:
        return frozenset({f"q_{self.produces}", f"k_{self.produces}"})

    def decision_parts(self) -> tuple[_CriterionSpec, ...]:
        return (self,)

    def decide(self, q, k, *, generator=None, check_ids: bool = True) -> Decisions:
        fields = {n: getattr(self, n) for n in self.criterion_fields}
        crit = get_criterion(self.criterion)
        qd, kd = crit(q, k, generator=generator, check_ids=check_ids, **fields)  # type: ignore[attr-defined]
        return Decisions(**{f"q_{self.produces}": qd, f"k_{self.produces}": kd})


class Dense(_Spec):
    """Plain attention: every (causal) element kept."""

    kind: Literal["dense"] = "dense"


class QKDrop(_CriterionSpec):
    """Drop queries and keys per (b, h, token); (i, j) kept when both are kept.

    A dropped query outputs zeros. ``keep`` is the fraction the built-in Bernoulli criterion
    keeps, in (0, 1].
    """

    kind: Literal["qk_drop"] = "qk_drop"
    keep: Annotated[StrictFloat, _in_range(0, 1, " (the fraction of tokens kept)", above_lo=True)] = 0.7
    criterion: StrictStr = "bernoulli"
    produces: ClassVar[str] = "keep"
    criterion_fields: ClassVar[tuple[str, ...]] = ("keep",)

    def mask_mod(self, dec: Decisions, q_offset: int = 0) -> MaskMod:
        qk, kk = dec.q_keep, dec.k_keep
        return lambda b, h, i, j: qk[b, h, i] & kk[b, h, j]


class Hash(_CriterionSpec):
    """Bucket queries and keys per (b, h, token); (i, j) kept when their buckets are equal.

    ``attend_self=False`` also drops (i, i), as in Reformer: with causality a query then sees
    only strictly earlier keys, and a query alone in its bucket outputs zeros.
    """

    kind: Literal["hash"] = "hash"
    buckets: Annotated[StrictInt, _in_range(1, 65536)] = 16
    criterion: StrictStr = "lsh"
    attend_self: StrictBool = True
    produces: ClassVar[str] = "bucket"
    criterion_fields: ClassVar[tuple[str, ...]] = ("buckets",)

    def mask_mod(self, dec: Decisions, q_offset: int = 0) -> MaskMod:
        qb, kb = dec.q_bucket, dec.k_bucket
        if self.attend_self:
            return lambda b, h, i, j: qb[b, h, i] == kb[b, h, j]
        return lambda b, h, i, j: (qb[b, h, i] == kb[b, h, j]) & (i + q_offset != j)


class TopKFeatures(_CriterionSpec):
    """Keep the ``k`` features of each query and key that its criterion picks (largest |x| by
    default, ties to the lowest id); the score of (i, j) is the dot product of the two
    sparsified vectors. V stays dense; gradients reach only the kept entries of q and k."""

    kind: Literal["topk_features"] = "topk_features"
    k: Annotated[StrictInt, _in_range(1, 256, " (features kept per token, at most D)")] = 8
    criterion: StrictStr = "topk_abs"
    produces: ClassVar[str] = "support"
    criterion_fields: ClassVar[tuple[str, ...]] = ("k",)

    def supports(self, dec: Decisions) -> tuple[Tensor, Tensor]:
        return dec.q_support, dec.k_support


Part = Annotated[Union[QKDrop, Hash, TopKFeatures], Field(discriminator="kind")]


class Hybrid(_Spec):
    """The AND of its parts: e.g. same bucket AND both kept; at most one part of each kind."""

    kind: Literal["hybrid"] = "hybrid"
    parts: tuple[Part, ...]

    @field_validator("parts")
    @classmethod
    def _distinct_parts(cls, parts: tuple) -> tuple:
        if not parts:
            raise ValueError("parts must hold at least one of QKDrop, Hash, TopKFeatures")
        kinds = [p.kind for p in parts]
        if dup := sorted({k for k in kinds if kinds.count(k) > 1}):
            raise ValueError(f"parts must have at most one part of each kind; {dup} appears more than once")
        return parts

    @property
    def decision_fields(self) -> frozenset[str]:
        return frozenset().union(*(p.decision_fields for p in self.parts))

    def mask_mod(self, dec: Decisions, q_offset: int = 0) -> MaskMod | None:
        return and_masks(*(p.mask_mod(dec, q_offset) for p in self.parts))

    def supports(self, dec: Decisions) -> tuple[Tensor, Tensor] | None:
        return next((s for p in self.parts if (s := p.supports(dec)) is not None), None)

    def decision_parts(self) -> tuple[_CriterionSpec, ...]:
        return self.parts


Rest = Annotated[Union[Dense, QKDrop, Hash, TopKFeatures, Hybrid], Field(discriminator="kind")]


class PerHead(_Spec):
    """Heads in ``dense_heads`` attend densely (their decisions are ignored); the others
    follow ``rest``."""

    kind: Literal["per_head"] = "per_head"
    dense_heads: tuple[StrictInt, ...]
    rest: Rest

    @field_validator("dense_heads")
    @classmethod
    def _heads(cls, heads: tuple[int, ...]) -> tuple[int, ...]:
        if bad := [h for h in heads if h < 0]:
            raise ValueError(f"dense_heads must be head indices >= 0, got {bad}")
        if dup := sorted({h for h in heads if heads.count(h) > 1}):
            raise ValueError(f"dense_heads must not repeat a head; {dup} appears more than once")
        return tuple(sorted(heads))

    @property
    def decision_fields(self) -> frozenset[str]:
        return self.rest.decision_fields

    def dense_heads_mask(self, heads: int) -> Tensor:
        if bad := [h for h in self.dense_heads if h >= heads]:
            raise ValueError(f"PerHead.dense_heads {bad} out of range for {heads} query heads")
        m = torch.zeros(heads, dtype=torch.bool)
        m[list(self.dense_heads)] = True
        return m

    def mask_mod(self, dec: Decisions, q_offset: int = 0) -> MaskMod | None:
        rest = self.rest.mask_mod(dec, q_offset)
        if rest is None:
            return None
        dense_of: dict[torch.device, Tensor] = {}

        def mod(b, h, i, j):
            if h.device not in dense_of:
                heads = max(int(h.max()) + 1, max(self.dense_heads, default=-1) + 1)
                dense_of[h.device] = self.dense_heads_mask(heads).to(h.device)
            return dense_of[h.device][h] | rest(b, h, i, j)

        return mod

    def supports(self, dec: Decisions) -> tuple[Tensor, Tensor] | None:
        return self.rest.supports(dec)

    def decision_parts(self) -> tuple[_CriterionSpec, ...]:
        return self.rest.decision_parts()


Spec = Annotated[Union[Dense, QKDrop, Hash, TopKFeatures, Hybrid, PerHead], Field(discriminator="kind")]
_SPEC = TypeAdapter(Spec)


def parse_spec(data: str | bytes | dict | _Spec) -> _Spec:
    """A spec from its JSON text or dict (``{"kind": "hash", "buckets": 16}``)."""
    if isinstance(data, _Spec):
        return data
    if isinstance(data, str | bytes):
        return _SPEC.validate_json(data)
    return _SPEC.validate_python(data)
