"""Hypothesis strategies for tilesparse: specs, decisions for a spec, and attention inputs.

Every argument is keyword-only and has a small bounded default; anything that varies may be
given as a value or as a strategy (``st.just`` fixes one). Arguments are checked when the
strategy is built, not when it is drawn, and errors say how to fix the call. Tested in
``tests/testing/test_strategies.py`` (validity of every draw, reachability of each edge case,
the examples below), on CPU.

Example: a property test of a compiled pattern against its reference::

    >>> import torch
    >>> from hypothesis import given, settings, strategies as st
    >>> import tilesparse as ts
    >>> from tilesparse.testing import assert_equivalent, attention_inputs, decisions, specs
    >>> @settings(max_examples=5, deadline=None)
    ... @given(data=st.data())
    ... def check(data):
    ...     q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 40), dtype=torch.float32))
    ...     spec = data.draw(specs(heads=q.shape[1]))
    ...     dec = data.draw(decisions(spec, q.shape))
    ...     assert_equivalent(ts.compile(spec, backend="executor"), q, k, v, decisions=dec)
    >>> check()

Known limits: values are random normal tensors drawn from one seed (hypothesis shrinks the
seed, not single elements); decisions are drawn independently of q and k, as a user passing
``decisions=`` may; Hybrid parts are drawn from all three part kinds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from ..ir import SUPPORTED_DTYPES
from ..patterns import Decisions, Dense, Hash, Hybrid, PerHead, QKDrop, SpecBase, TopKFeatures, parse_spec

__all__ = ["PART_KINDS", "SPEC_KINDS", "attention_inputs", "decisions", "document_ids", "key_padding_masks", "specs"]


SPEC_KINDS: tuple[str, ...] = ("dense", "qk_drop", "hash", "topk_features", "hybrid")
"""Pattern kinds :func:`specs` draws (PerHead wraps one of them when ``allow_per_head``)."""

PART_KINDS: tuple[str, ...] = ("qk_drop", "hash", "topk_features")
"""Kinds a Hybrid is made of."""

# per-(b, h) ways to fill one decision field; the first is the ordinary random case, the
# others are the edge cases the semantics single out
KEEP_MODES = ("random", "all", "none", "prefix_dropped", "one_kept")
BUCKET_MODES = ("random", "one_bucket", "same_as_query", "disjoint", "runs", "isolated_query")
SUPPORT_MODES = ("random", "shared", "disjoint", "first_k")
PADDING_MODES = ("random", "none", "left", "right", "all_padded")
DOCUMENT_MODES = ("packed", "one", "singletons", "random")

_SEEDS = st.integers(0, 2**32 - 1)

# the defaults of attention_inputs and decisions: small, so the executor and reference are fast
DEFAULT_BATCH = st.integers(1, 2)
DEFAULT_HEADS = st.integers(1, 4)
DEFAULT_SEQLEN = st.integers(1, 256)
DEFAULT_HEAD_DIM = st.sampled_from((8, 16, 32, 64))
DEFAULT_DTYPE = st.sampled_from(SUPPORTED_DTYPES)
DEFAULT_INDEX_DTYPE = st.sampled_from((torch.int32, torch.int64))


def _strategy(name: str, value: Any, check: Callable[[Any], str | None]) -> SearchStrategy:
    """``value`` as a strategy: strategies pass through, values are checked and wrapped in just."""
    if isinstance(value, SearchStrategy):
        return value
    if (problem := check(value)) is not None:
        raise InvalidArgument(f"{name}={value!r}: {problem} (or pass a hypothesis strategy)")
    return st.just(value)


def _int_in(lo: int, hi: int | None = None) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int):
            return f"must be an int, got {type(v).__name__}"
        if v < lo or (hi is not None and v > hi):
            return f"must be in [{lo}, {hi}]" if hi is not None else f"must be >= {lo}"
        return None

    return check


def _keep_fraction(v: Any) -> str | None:
    if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 < v <= 1.0:
        return "must be a float in (0, 1], the fraction of tokens QKDrop keeps"
    return None


def _is_bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be a bool, got {type(v).__name__}"


def _bound(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if (problem := _int_in(lo, hi)(value)) is not None:
        raise InvalidArgument(f"{name}={value!r}: {problem}")
    return value


def _kinds(name: str, kinds: Any, allowed: Sequence[str]) -> tuple[str, ...]:
    if isinstance(kinds, str) or not isinstance(kinds, Sequence | set | frozenset):
        raise InvalidArgument(f"{name}={kinds!r}: pass a sequence of kind names, e.g. {name}={tuple(allowed[:2])}")
    out = tuple(dict.fromkeys(kinds))
    if not out:
        raise InvalidArgument(f"{name} is empty: name at least one of {allowed}")
    if bad := [k for k in out if k not in allowed]:
        raise InvalidArgument(f"{name} has unknown kinds {bad}; choose from {allowed}")
    return out


# ---------------------------------------------------------------------------------------------
# specs


def specs(
    *,
    kinds: Sequence[str] = SPEC_KINDS,
    allow_per_head: bool = True,
    heads: int = 1,
    max_buckets: int = 16,
    max_k: int = 8,
    max_parts: int = 3,
    keep: float | SearchStrategy[float] | None = None,
    buckets: int | SearchStrategy[int] | None = None,
    k: int | SearchStrategy[int] | None = None,
    attend_self: bool | SearchStrategy[bool] | None = None,
) -> SearchStrategy[SpecBase]:
    """Pattern specs of the given ``kinds``, each valid and built with the built-in criteria.

    ``kinds`` picks among "dense", "qk_drop", "hash", "topk_features", "hybrid" (a Hybrid of 1
    to ``max_parts`` distinct part kinds); ``allow_per_head`` also draws PerHead around one of
    them, with ``dense_heads`` a subset of ``range(heads)``: pass the query head count of the
    inputs the spec will run on (the default 1 fits any input). ``keep`` (default: a fraction
    in (0, 1]), ``buckets`` (default 1..``max_buckets``), ``k`` (default 1..``max_k``; keep it
    <= the head dim) and ``attend_self`` (default either) fix or vary the fields.
    """
    kinds = _kinds("kinds", kinds, SPEC_KINDS)
    if not isinstance(allow_per_head, bool):
        raise InvalidArgument(f"allow_per_head={allow_per_head!r}: must be a bool")
    heads = _bound("heads", heads, 1)
    max_buckets = _bound("max_buckets", max_buckets, 1, 65536)
    max_k = _bound("max_k", max_k, 1, 256)
    max_parts = _bound("max_parts", max_parts, 1, len(PART_KINDS))
    keeps = _strategy("keep", keep, _keep_fraction) if keep is not None else _KEEPS
    buckets_ = _strategy("buckets", buckets, _int_in(1, 65536)) if buckets is not None else st.integers(1, max_buckets)
    ks = _strategy("k", k, _int_in(1, 256)) if k is not None else st.integers(1, max_k)
    selfs = _strategy("attend_self", attend_self, _is_bool) if attend_self is not None else st.booleans()

    part = {
        "qk_drop": st.builds(QKDrop, keep=keeps),
        "hash": st.builds(Hash, buckets=buckets_, attend_self=selfs),
        "topk_features": st.builds(TopKFeatures, k=ks),
    }
    hybrid = st.lists(st.sampled_from(PART_KINDS), min_size=1, max_size=max_parts, unique=True).flatmap(
        lambda names: st.tuples(*(part[n] for n in names)).map(lambda parts: Hybrid(parts=parts))
    )
    by_kind = {"dense": st.just(Dense()), **part, "hybrid": hybrid}
    base = st.one_of(*(by_kind[name] for name in kinds))
    if not allow_per_head:
        return base
    per_head = st.builds(
        PerHead, dense_heads=st.lists(st.integers(0, heads - 1), unique=True, max_size=heads), rest=base
    )
    return st.one_of(base, per_head)


# keep fractions: a few round values (bit-exact through JSON) and arbitrary floats
_KEEPS = st.one_of(st.sampled_from((0.1, 0.25, 0.5, 0.7, 1.0)), st.floats(0.0, 1.0, exclude_min=True))


# ---------------------------------------------------------------------------------------------
# decisions


def _check_shape(shape: Any) -> tuple[int, int, int, int]:
    if not (isinstance(shape, tuple | list | torch.Size) and len(shape) == 4):
        raise InvalidArgument(f"shape={shape!r}: pass (B, H, T, D), e.g. q.shape")
    for name, n in zip("BHTD", shape, strict=True):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidArgument(f"shape={tuple(shape)!r}: {name} must be an int >= 1")
    return tuple(shape)  # type: ignore[return-value]


def _check_spec(spec: Any) -> SpecBase:
    try:
        return parse_spec(spec)
    except (ValueError, TypeError) as e:  # pydantic's ValidationError is a ValueError
        raise InvalidArgument(f"spec={spec!r} is not a tilesparse spec ({e}); pass e.g. ts.Hash(buckets=4)") from None


def _check_fits(spec: SpecBase, shape: tuple[int, int, int, int]) -> None:
    """Raise when decisions of ``spec`` cannot exist for ``shape`` (TopK k > D, heads out of range)."""
    _, H, _, D = shape
    if isinstance(spec, PerHead) and (bad := [h for h in spec.dense_heads if h >= H]):
        raise InvalidArgument(f"{spec}: dense_heads {bad} out of range for H={H}; draw specs with specs(heads={H})")
    for p in _parts(spec):
        if isinstance(p, TopKFeatures) and p.k > D:
            raise InvalidArgument(f"{spec}: TopKFeatures.k={p.k} > D={D}; draw specs with specs(max_k={D})")


def _parts(spec: SpecBase) -> tuple[SpecBase, ...]:
    spec = spec.rest if isinstance(spec, PerHead) else spec
    return tuple(spec.parts) if isinstance(spec, Hybrid) else (spec,)


def decisions(
    spec: SpecBase | SearchStrategy[SpecBase],
    shape: tuple[int, int, int, int] | SearchStrategy[tuple[int, int, int, int]],
    *,
    k_len: int | SearchStrategy[int] | None = None,
    edge_cases: bool = True,
    index_dtype: torch.dtype | SearchStrategy[torch.dtype] = DEFAULT_INDEX_DTYPE,
    device: str | torch.device = "cpu",
) -> SearchStrategy[Decisions]:
    """Valid :class:`tilesparse.Decisions` for ``spec`` on inputs of ``shape`` (B, H, Tq, D),
    q's shape, against ``k_len`` keys (Tk >= Tq; default Tk = Tq): query-side fields are
    (B, H, Tq), key-side ones (B, H, Tk).

    Each (b, h) picks its own way to fill each field. With ``edge_cases`` (the default) these
    include every query of a head dropped, every key dropped, a prefix of keys dropped (early
    queries keep no key), all tokens in one bucket, queries and keys in disjoint buckets, a
    query whose bucket no key shares, and identical or disjoint feature supports; otherwise
    every field is random. Bucket and support ids have ``index_dtype``.
    """
    if not isinstance(edge_cases, bool):
        raise InvalidArgument(f"edge_cases={edge_cases!r}: must be a bool")
    specs_ = spec if isinstance(spec, SearchStrategy) else st.just(_check_spec(spec))
    shapes = shape if isinstance(shape, SearchStrategy) else st.just(_check_shape(shape))
    if not isinstance(spec, SearchStrategy) and not isinstance(shape, SearchStrategy):
        _check_fits(_check_spec(spec), _check_shape(shape))
    dtypes = _strategy(
        "index_dtype",
        index_dtype,
        lambda d: None if d in (torch.int32, torch.int64) else "must be torch.int32 or torch.int64",
    )
    device = torch.device(device)
    k_lens = None if k_len is None else _strategy("k_len", k_len, _int_in(1))

    @st.composite
    def draw_decisions(draw) -> Decisions:
        s = _check_spec(draw(specs_))
        B, H, T, D = _check_shape(draw(shapes))
        _check_fits(s, (B, H, T, D))
        Tk = T if k_lens is None else draw(k_lens)
        if Tk < T:
            raise InvalidArgument(f"k_len={Tk} < Tq={T}: keys must be at least as many as queries")
        idx = draw(dtypes)
        fields: dict[str, torch.Tensor] = {}
        modes = (lambda all_modes: all_modes) if edge_cases else (lambda all_modes: all_modes[:1])
        for p in _parts(s):
            if isinstance(p, QKDrop):
                for side, n in (("q", T), ("k", Tk)):
                    fields[f"{side}_keep"] = _per_head(draw, (B, H), modes(KEEP_MODES), _keep, n)
            elif isinstance(p, Hash):
                pairs = _per_head(draw, (B, H), modes(BUCKET_MODES), _buckets, T, Tk, p.buckets)
                fields["q_bucket"], fields["k_bucket"] = pairs[0].to(idx), pairs[1].to(idx)
            elif isinstance(p, TopKFeatures):
                pairs = _per_head(draw, (B, H), modes(SUPPORT_MODES), _supports, T, Tk, D, p.k)
                fields["q_support"], fields["k_support"] = pairs[0].to(idx), pairs[1].to(idx)
        return Decisions(**{n: t.to(device) for n, t in fields.items()})

    return draw_decisions()


def _per_head(draw, batch_heads: tuple[int, int], modes: tuple[str, ...], make, *sizes: int):
    """Stack ``make(mode, generator, *sizes)`` over (b, h), each (b, h) with a drawn mode and seed."""
    rows = []
    for _ in range(batch_heads[0] * batch_heads[1]):
        mode = draw(st.sampled_from(modes))
        rows.append(make(mode, torch.Generator().manual_seed(draw(_SEEDS)), *sizes))
    if isinstance(rows[0], tuple):
        return tuple(torch.stack([r[i] for r in rows]).unflatten(0, batch_heads) for i in range(2))
    return torch.stack(rows).unflatten(0, batch_heads)


def _keep(mode: str, g: torch.Generator, T: int) -> torch.Tensor:
    if mode == "random":
        p = float(torch.rand((), generator=g)) * 0.9 + 0.05
        return torch.rand(T, generator=g) < p
    if mode in ("all", "none"):
        return torch.full((T,), mode == "all")
    if mode == "prefix_dropped":
        return torch.arange(T) >= int(torch.randint(1, T + 1, (), generator=g))
    if mode == "one_kept":
        return torch.arange(T) == int(torch.randint(0, T, (), generator=g))
    raise AssertionError(mode)


def _buckets(mode: str, g: torch.Generator, T: int, Tk: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(Tq,) query and (Tk,) key buckets; queries sit at the last Tq key positions."""
    rand = lambda size: torch.randint(0, n, (size,), generator=g)  # noqa: E731
    if mode == "random" or (n == 1 and mode in ("disjoint", "isolated_query")):
        return rand(T), rand(Tk)
    if mode == "one_bucket":
        a = int(torch.randint(0, n, (), generator=g))
        return torch.full((T,), a), torch.full((Tk,), a)
    if mode == "same_as_query":
        q, k = rand(T), rand(Tk)
        k[Tk - T :] = q  # a key at a query's position shares its bucket
        return q, k
    if mode == "disjoint":
        a = int(torch.randint(0, n, (), generator=g))
        return torch.full((T,), a), torch.full((Tk,), (a + 1) % n)
    if mode == "runs":
        return rand(T).sort().values, rand(Tk).sort().values
    if mode == "isolated_query":
        q, k = rand(T), rand(Tk)
        i = int(torch.randint(0, T, (), generator=g))
        return q, torch.where(k == q[i], (k + 1) % n, k)
    raise AssertionError(mode)


def _supports(mode: str, g: torch.Generator, T: int, Tk: int, D: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    rand = lambda size: torch.rand((size, D), generator=g).argsort(dim=-1)[:, :k]  # noqa: E731
    if mode == "random":
        return rand(T), rand(Tk)
    if mode == "shared":
        ids = torch.randperm(D, generator=g)[:k]
        return ids.expand(T, k).clone(), ids.expand(Tk, k).clone()
    if mode == "disjoint" and 2 * k <= D:
        ids = torch.randperm(D, generator=g)
        return ids[:k].expand(T, k).clone(), ids[k : 2 * k].expand(Tk, k).clone()
    if mode in ("disjoint", "first_k"):
        ids = torch.arange(k - 1, -1, -1)  # descending: ids need not be sorted
        return ids.expand(T, k).clone(), ids.expand(Tk, k).clone()
    raise AssertionError(mode)


# ---------------------------------------------------------------------------------------------
# inputs


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def attention_inputs(
    *,
    batch: int | SearchStrategy[int] = DEFAULT_BATCH,
    heads: int | SearchStrategy[int] = DEFAULT_HEADS,
    kv_heads: int | SearchStrategy[int] | None = None,
    gqa: bool = True,
    seqlen: int | SearchStrategy[int] = DEFAULT_SEQLEN,
    shorter_queries: bool = False,
    head_dim: int | SearchStrategy[int] = DEFAULT_HEAD_DIM,
    dtype: torch.dtype | SearchStrategy[torch.dtype] = DEFAULT_DTYPE,
    requires_grad: bool = True,
    device: str | torch.device = "cpu",
) -> SearchStrategy[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(q, k, v): q (B, H, Tq, D), k and v (B, Hkv, T, D), standard normal values in ``dtype``.

    Tq = T unless ``shorter_queries``, which draws Tq from [1, T] (1: a decode step, T: the
    training case, in between: a prefill chunk against earlier keys); pass
    ``k_len=k.shape[2]`` to :func:`decisions` then.
    ``kv_heads`` defaults to a divisor of the drawn H (grouped-query attention) when ``gqa``,
    else to H; given, it must divide H. ``head_dim`` must be a multiple of 8 in [8, 256].
    The tensors are leaves with ``requires_grad``.
    """
    batches = _strategy("batch", batch, _int_in(1, 64))
    heads_ = _strategy("heads", heads, _int_in(1, 64))
    kv = None if kv_heads is None else _strategy("kv_heads", kv_heads, _int_in(1, 64))
    if not isinstance(gqa, bool):
        raise InvalidArgument(f"gqa={gqa!r}: must be a bool (whether kv_heads may be fewer than heads)")
    if not isinstance(heads, SearchStrategy) and isinstance(kv_heads, int) and heads % kv_heads:
        raise InvalidArgument(f"kv_heads={kv_heads} must divide heads={heads} (grouped-query attention)")
    seqlens = _strategy("seqlen", seqlen, _int_in(1))
    dims = _strategy(
        "head_dim", head_dim, lambda d: _int_in(8, 256)(d) or (None if d % 8 == 0 else "must be a multiple of 8")
    )
    dtypes = _strategy(
        "dtype", dtype, lambda d: None if d in SUPPORTED_DTYPES else f"must be one of {SUPPORTED_DTYPES}"
    )
    if not isinstance(requires_grad, bool):
        raise InvalidArgument(f"requires_grad={requires_grad!r}: must be a bool")
    if not isinstance(shorter_queries, bool):
        raise InvalidArgument(f"shorter_queries={shorter_queries!r}: must be a bool (whether Tq may be < T)")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise InvalidArgument(f"device={device!r}: not a torch device ({e})") from None

    @st.composite
    def draw_inputs(draw):
        B, H, T, D = draw(batches), draw(heads_), draw(seqlens), draw(dims)
        if kv is not None:
            Hkv = draw(kv)
            if H % Hkv:
                raise InvalidArgument(f"kv_heads={Hkv} does not divide heads={H}; draw kv_heads from its divisors")
        else:
            Hkv = draw(st.sampled_from(_divisors(H))) if gqa else H
        dt = draw(dtypes)
        Tq = draw(st.one_of(st.just(1), st.just(T), st.integers(1, T))) if shorter_queries else T
        g = torch.Generator().manual_seed(draw(_SEEDS))
        shapes = ((B, H, Tq, D), (B, Hkv, T, D), (B, Hkv, T, D))
        return tuple(
            torch.randn(s, generator=g).to(device=device, dtype=dt).requires_grad_(requires_grad) for s in shapes
        )

    return draw_inputs()


# ---------------------------------------------------------------------------------------------
# key padding and packed documents


def _per_row(
    batch: int | SearchStrategy[int],
    seqlen: int | SearchStrategy[int],
    device: str | torch.device,
    draw_row: Callable[[Callable, int], torch.Tensor],
) -> SearchStrategy[torch.Tensor]:
    """(B, T) tensors on ``device``, each batch row drawn by ``draw_row(draw, T)``."""
    batches = _strategy("batch", batch, _int_in(1, 64))
    seqlens = _strategy("seqlen", seqlen, _int_in(1))
    device = torch.device(device)

    @st.composite
    def draw_rows(draw) -> torch.Tensor:
        B, T = draw(batches), draw(seqlens)
        return torch.stack([draw_row(draw, T) for _ in range(B)]).to(device)

    return draw_rows()


def key_padding_masks(
    batch: int | SearchStrategy[int], seqlen: int | SearchStrategy[int], *, device: str | torch.device = "cpu"
) -> SearchStrategy[torch.Tensor]:
    """(B, T) bool key-padding masks (True for a real key). Each batch row picks a mode: random,
    no padding, left padding, right padding, or every key padded (every query row empty)."""

    def draw_row(draw, T: int) -> torch.Tensor:
        mode = draw(st.sampled_from(PADDING_MODES))
        n = draw(st.integers(0, T))
        if mode == "random":
            g = torch.Generator().manual_seed(draw(_SEEDS))
            return torch.rand(T, generator=g) < 0.7
        if mode == "none":
            return torch.ones(T, dtype=torch.bool)
        if mode == "left":
            return torch.arange(T) >= n
        if mode == "right":
            return torch.arange(T) < n
        return torch.zeros(T, dtype=torch.bool)

    return _per_row(batch, seqlen, device, draw_row)


def document_ids(
    batch: int | SearchStrategy[int],
    seqlen: int | SearchStrategy[int],
    *,
    max_documents: int = 8,
    device: str | torch.device = "cpu",
) -> SearchStrategy[torch.Tensor]:
    """(B, T) int64 document ids >= 0. Each batch row picks a mode: ``packed`` (contiguous
    documents of random lengths, one-token documents included, ids increasing), ``one``
    (a single document), ``singletons`` (every token its own document, up to
    ``max_documents`` ids, then repeating) or ``random`` (ids in any order)."""
    max_documents = _bound("max_documents", max_documents, 1, 4096)

    def draw_row(draw, T: int) -> torch.Tensor:
        mode = draw(st.sampled_from(DOCUMENT_MODES))
        if mode == "packed":
            cuts = sorted(draw(st.lists(st.integers(1, max(1, T - 1)), max_size=max_documents - 1, unique=True)))
            row = torch.zeros(T, dtype=torch.int64)
            for c in cuts:
                row[c:] += 1
            return row
        if mode == "one":
            return torch.full((T,), draw(st.integers(0, max_documents - 1)), dtype=torch.int64)
        if mode == "singletons":
            return torch.arange(T, dtype=torch.int64) % max_documents
        g = torch.Generator().manual_seed(draw(_SEEDS))
        return torch.randint(0, max_documents, (T,), generator=g)

    return _per_row(batch, seqlen, device, draw_row)
