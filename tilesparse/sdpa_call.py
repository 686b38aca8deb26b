"""The keyword arguments of ``F.scaled_dot_product_attention`` on a compiled op, and the call
that runs them.

:func:`parse_sdpa_call` checks them once and returns an :class:`SdpaCall`:

- ``scale``: overrides the compiled scale for this call;
- ``is_causal``: must equal the compiled causality (the mask is compiled in, not chosen per
  call); None means "as compiled";
- ``enable_gqa``: grouped-query attention is always on; ``False`` with fewer kv heads than
  query heads is refused, as SDPA refuses it;
- ``attn_mask``: a boolean key-padding mask, shape (B, Tk), (B, 1, 1, Tk) or anything that
  broadcasts to (B, Tk) that way (True keeps the key, SDPA's convention); other masks are
  refused;
- ``dropout_p``: 0.0 only (attention dropout is not implemented);
- ``key_padding_mask`` (B, Tk) bool and ``document_ids`` (B, Tk) ints: the exact predicates of
  :mod:`tilesparse.patterns.padding`; ``max_documents`` (an int) promises ids in
  [0, max_documents), so the number of documents is known without reading the ids back (no
  device sync; the ids are then checked on the device, as given decisions are); without it
  the call reads their range back (one sync);
- ``return_lse``: also return the log-sum-exp of each query row's kept scores (natural log,
  scores scaled, (B, H, Tq) float32, ``-inf`` for a row with no kept key), as flash-attn and
  FlexAttention do. It is computed by a chunked exact pass over the same mask and decisions
  (O(Tq * Tk * D) work, O(chunk * Tk) memory, no gradient): a diagnostic, not a kernel output.

:func:`parse_sdpa_call`'s signature is the one place these keywords, their annotations and
defaults are declared; :func:`with_sdpa_keywords` shows them in the signature of a call that
forwards them (``CompiledAttention.__call__``).

:func:`run_sdpa_call` runs a call that uses any of them: padding and documents through a
rewritten spec (a sibling op, compiled once per variant and cached on the op) given the
combined decisions.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
from torch import Tensor

from .ir import check_inputs
from .patterns import decision_errors
from .patterns.decision_errors import poisoned
from .patterns.padding import document_count_of, padded_decisions, padding_mask_mod, with_padding

__all__ = [
    "SDPA_KEYWORDS",
    "SdpaCall",
    "check_sdpa_keywords",
    "document_range",
    "parse_sdpa_call",
    "polling",
    "row_logsumexp",
    "run_sdpa_call",
    "with_sdpa_keywords",
]

LSE_CHUNK = 256  # query rows per chunk of the exact log-sum-exp pass


@dataclass(frozen=True, eq=False)
class SdpaCall:
    """A call's checked SDPA-style arguments; ``plain`` when none changes the compiled call."""

    scale: float | None = None
    key_padding_mask: Tensor | None = None
    document_ids: Tensor | None = None
    return_lse: bool = False
    max_documents: int | None = None

    @property
    def plain(self) -> bool:
        masks = self.key_padding_mask is not None or self.document_ids is not None
        return self.scale is None and not masks and not self.return_lse


PLAIN = SdpaCall()


def parse_sdpa_call(
    q: Tensor,
    k: Tensor,
    *,
    causal: bool,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool | None = None,
    scale: float | None = None,
    enable_gqa: bool | None = None,
    return_lse: bool = False,
    key_padding_mask: Tensor | None = None,
    document_ids: Tensor | None = None,
    max_documents: int | None = None,
) -> SdpaCall:
    """Check the keyword arguments against q (B, H, Tq, D), k (B, Hkv, Tk, D) and the compiled
    causality; every error names the argument, the value and what is accepted."""
    if (attn_mask is None and key_padding_mask is None and document_ids is None and is_causal is None
            and scale is None and enable_gqa is None and return_lse is False and dropout_p == 0.0
            and max_documents is None):  # fmt: skip
        return PLAIN  # the common call: nothing to check (and nothing for dynamo to trace)
    if is_causal is not None and bool(is_causal) != causal:
        raise ValueError(
            f"is_causal={is_causal!r} but this op was compiled with causal={causal}: causality is "
            f"compiled in; compile another op with ts.compile(spec, causal={bool(is_causal)})"
        )
    if not isinstance(dropout_p, int | float) or dropout_p != 0.0:
        raise ValueError(f"dropout_p={dropout_p!r}: attention dropout is not supported; pass dropout_p=0.0")
    if scale is not None and (not isinstance(scale, int | float) or isinstance(scale, bool) or not scale > 0):
        raise ValueError(f"scale must be a positive number or None, got {scale!r}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be a bool, got {return_lse!r}")
    if not (isinstance(q, Tensor) and isinstance(k, Tensor) and q.dim() == 4 and k.dim() == 4):
        return SdpaCall(scale=scale, return_lse=return_lse)  # check_inputs names the bad tensor
    B, H, Tk = q.shape[0], q.shape[1], k.shape[2]
    if enable_gqa is not None:
        if not isinstance(enable_gqa, bool):
            raise TypeError(f"enable_gqa must be a bool, got {enable_gqa!r}")
        if not enable_gqa and k.shape[1] != H:
            raise ValueError(
                f"enable_gqa=False but k has {k.shape[1]} heads and q {H}: pass enable_gqa=True for "
                "grouped-query attention (k and v are read per kv head, never repeated)"
            )
    if attn_mask is not None:
        if key_padding_mask is not None:
            raise ValueError("pass either attn_mask= or key_padding_mask=, not both (they mean the same here)")
        key_padding_mask = _key_padding_from_attn_mask(attn_mask, B, Tk)
    if key_padding_mask is not None:
        key_padding_mask = _check_key_padding(key_padding_mask, B, Tk, q.device)
    if max_documents is not None:
        if isinstance(max_documents, bool) or not isinstance(max_documents, int) or max_documents < 1:
            raise ValueError(f"max_documents must be an int >= 1 or None, got {max_documents!r}")
        if document_ids is None:
            raise ValueError("max_documents= bounds document_ids=; pass document_ids too, or neither")
    if document_ids is not None:
        document_ids = _check_documents(document_ids, B, Tk, q.device)
    return SdpaCall(scale=scale, key_padding_mask=key_padding_mask, document_ids=document_ids, return_lse=return_lse,
                    max_documents=max_documents)  # fmt: skip


# the keywords parse_sdpa_call declares for a call to pass on (causal is the op's own)
_SDPA_PARAMETERS = [p for name, p in inspect.signature(parse_sdpa_call).parameters.items()
                    if p.kind is p.KEYWORD_ONLY and name != "causal"]  # fmt: skip
SDPA_KEYWORDS: frozenset[str] = frozenset(p.name for p in _SDPA_PARAMETERS)


def with_sdpa_keywords(fn: Callable) -> Callable:
    """``fn``, whose ``**sdpa`` it passes on to :func:`parse_sdpa_call`, with a signature that
    lists those keywords in its place as parse_sdpa_call declares them (annotations, defaults):
    help() and ``inspect.signature`` show the whole call."""
    sig = inspect.signature(fn)
    own = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    fn.__signature__ = sig.replace(parameters=own + _SDPA_PARAMETERS)
    return fn


def check_sdpa_keywords(where: str, sdpa: dict) -> None:
    """A keyword a call passed on that is none of :data:`SDPA_KEYWORDS` (a misspelling) is a
    ``TypeError`` naming ``where``, as a plain signature's would be."""
    if unknown := sorted(name for name in sdpa if name not in SDPA_KEYWORDS):  # a loop dynamo traces
        raise TypeError(
            f"{where}() got unexpected keyword arguments {unknown}; besides its own, it takes SDPA's "
            f"{sorted(SDPA_KEYWORDS)}"
        )


def _key_padding_from_attn_mask(mask: object, B: int, Tk: int) -> Tensor:
    if not isinstance(mask, Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"attn_mask has dtype {mask.dtype}: only a boolean key-padding mask (True keeps the key) is "
            "supported; additive float masks are not"
        )
    shape = tuple(mask.shape)
    if mask.dim() == 4 and shape[1] == 1 and shape[2] == 1:
        mask = mask[:, 0, 0]
    elif mask.dim() == 1:
        mask = mask[None]
    elif mask.dim() != 2:
        raise ValueError(
            f"attn_mask of shape {shape} is not a key-padding mask: only (B, Tk), (B, 1, 1, Tk) or (Tk,) "
            "boolean masks are supported (per-query masks are patterns: declare them as a spec)"
        )
    if mask.shape[0] not in (1, B) or mask.shape[1] != Tk:
        raise ValueError(f"attn_mask of shape {shape} does not broadcast to (B={B}, Tk={Tk}) key padding")
    return mask.expand(B, Tk)


def _check_key_padding(mask: object, B: int, Tk: int, device: torch.device) -> Tensor:
    wrong = lambda dt: dt != torch.bool  # noqa: E731
    return _check_per_key("key_padding_mask", mask, B, Tk, device, wrong, "torch.bool (True for a real key)")


def _check_documents(ids: object, B: int, Tk: int, device: torch.device) -> Tensor:
    wrong = lambda dt: dt.is_floating_point or dt.is_complex or dt == torch.bool  # noqa: E731
    return _check_per_key("document_ids", ids, B, Tk, device, wrong, "an integer tensor")


def _check_per_key(
    name: str, t: object, B: int, Tk: int, device: torch.device, wrong_dtype: Callable[[torch.dtype], bool], want: str
) -> Tensor:
    """``t`` as a (B, Tk) tensor on the inputs' device, of a dtype ``wrong_dtype`` accepts
    (``want`` says which); checked in that order: type, dtype, shape, device."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(t).__name__}")
    if wrong_dtype(t.dtype):
        raise TypeError(f"{name} must be {want}, got {t.dtype}")
    if tuple(t.shape) != (B, Tk):
        raise ValueError(f"{name} must have shape (B={B}, Tk={Tk}), got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, the inputs are on {device}")
    return t


def document_range(ids: Tensor) -> tuple[int, int]:
    """(min, max) of the document ids, read back in one go (one device sync); a negative id is
    an error."""
    lo, hi = (int(x) for x in torch.stack(torch.aminmax(ids)).tolist()) if ids.numel() else (0, 0)
    if lo < 0:
        raise ValueError(f"document_ids must be >= 0, got min {lo}")
    return lo, hi


def _documents(attn, call: SdpaCall, inputs) -> tuple[Tensor | None, int, Tensor | None]:
    """The call's document ids, how many documents to reserve ids for, and a poison.

    With ``max_documents`` nothing is read back: on the GPU the ids are checked on the device
    (clamped into [0, max_documents), NaN output and a deferred error, as decisions are:
    :mod:`tilesparse.patterns.decision_errors`), on the CPU at once. Without it the ids' range
    is read back (one device sync a call)."""
    docs = call.document_ids
    if docs is None:
        return None, 1, None
    if call.max_documents is None:
        return docs, document_count_of(document_range(docs)[1]), None
    n = call.max_documents
    if inputs.device.type not in decision_errors.DEFERRED_DEVICES:
        lo, hi = document_range(docs)
        if hi >= n:
            raise ValueError(f"document_ids values must lie in [0, {n}) (max_documents={n}), got [{lo}, {hi}]")
        return docs, document_count_of(n - 1), None
    rows = (decision_errors.Row("document_ids", "range", n),)
    errors = attn._error_record(inputs.device, rows)
    fields, poison = decision_errors.check_on_device({"document_ids": docs}, rows, errors)
    return fields["document_ids"], document_count_of(n - 1), poison


def run_sdpa_call(
    attn, q: Tensor, k: Tensor, v: Tensor, call: SdpaCall, decisions, generator, *, keep_last: bool = True
):
    """``attn(q, k, v)`` under ``call``: the output, and (out, lse) when ``call.return_lse``
    (``keep_last``: as for ``CompiledAttention._eager``; not inside a custom op)."""
    scale = call.scale if call.scale is not None else attn.scale
    inputs = check_inputs(q, k, v, scale=scale)
    attn._check_spec_fits(inputs)
    attn._poll_errors(inputs.device)
    pad = call.key_padding_mask
    docs, documents, doc_poison = _documents(attn, call, inputs)
    spec = with_padding(attn.spec, key_padding=pad is not None, documents=documents)
    op = _variant(attn, spec, scale)
    poisons: list = []  # NaN where ids checked on the device are out of range (decision_errors)
    dec = attn._decisions(inputs, decisions, generator, poison=poisons)
    poison = poisons[0] if poisons else None
    if pad is not None or documents > 1:
        dec = padded_decisions(
            attn.spec, spec, dec, key_padding_mask=pad, document_ids=docs, documents=documents,
            heads=q.shape[1], q_len=q.shape[2],
        ).trusted(spec)  # fmt: skip
    elif not dec.present():
        dec = None
    if poison is not None and doc_poison is not None:  # both: one product of two numbers, not two of the output
        poison = poison * doc_poison
    elif poison is None:
        poison = doc_poison
    with _no_polls():  # polled above: this call's own errors come next call
        out = op._eager(q, k, v, dec, None, keep_last=keep_last, poison=poison)  # folded there where it can be
    if not call.return_lse:
        return out
    return out, poisoned(_lse(op, inputs, dec), poison)  # NaN with the output


def _variant(attn, spec, scale: float | None):
    """The op for ``spec`` at ``scale``: ``attn`` itself when neither changes, else a sibling
    compiled once and cached on ``attn`` (its own plan cache, the same backend and checks)."""
    if spec == attn.spec and scale == attn.scale:
        return attn
    cache = attn.__dict__.setdefault("_variants", {})
    key = (spec.model_dump_json(), scale)
    op = cache.get(key)
    if op is None:
        op = type(attn)(spec, causal=attn.causal, scale=scale, backend=attn.backend, validate=attn.validate)
        for name in ("seed", "resample"):  # the op's own randomness, where it has one
            if hasattr(attn, name):
                setattr(op, name, getattr(attn, name))
        cache[key] = op
    return op


def _lse(op, inputs, dec) -> Tensor:
    from .api import dense_mask  # the mask's one definition; api imports this module lazily too
    from .backends.reference import feature_mask

    from .patterns import Decisions

    dec = dec if dec is not None else Decisions()
    qf = kf = None
    sup = op.spec.supports(dec)
    if sup is not None:
        qf = feature_mask(sup[0], inputs.head_dim, torch.float32)
        kf = feature_mask(sup[1], inputs.head_dim, torch.float32)
        dense = op.spec.dense_heads_mask(inputs.heads)
        if dense is not None:
            qf[:, dense], kf[:, dense] = 1.0, 1.0

    def rows(r0: int, r1: int) -> Tensor | None:
        return dense_mask(op.spec, dec, causal=op.causal, inputs=inputs, rows=(r0, r1))

    return row_logsumexp(inputs.q, inputs.k, rows, scale=inputs.scale, q_features=qf, k_features=kf)


@torch.no_grad()
def row_logsumexp(
    q: Tensor, k: Tensor, mask_rows, *, scale: float, q_features=None, k_features=None, chunk: int = LSE_CHUNK
) -> Tensor:
    """(B, H, Tq) float32 log-sum-exp of each row's kept scaled scores, ``-inf`` for an empty
    row; ``mask_rows(r0, r1)`` gives the (B, H, r1 - r0, Tk) bool mask of rows [r0, r1) or None."""
    group = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(group, dim=1) if group > 1 else k.float()
    if k_features is not None:
        kf = kf * k_features
    Tq = q.shape[2]
    out = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for r0 in range(0, Tq, chunk):
        r1 = min(Tq, r0 + chunk)
        qc = q[:, :, r0:r1].float()
        if q_features is not None:
            qc = qc * q_features[:, :, r0:r1]
        s = qc @ kf.transpose(-1, -2) * scale
        m = mask_rows(r0, r1)
        if m is not None:
            s = s.masked_fill(~m, float("-inf"))
        out[:, :, r0:r1] = torch.logsumexp(s, dim=-1)
    return out


def reference_mask_mod(call_key_padding: Tensor | None, call_documents: Tensor | None, q_len: int):
    """The predicates' mask function for :meth:`CompiledAttention.reference`."""
    return padding_mask_mod(call_key_padding, call_documents, q_len)


# a padded call runs a sibling op inside it, after polling at its own start: the sibling does
# not poll (its errors and this call's come at the next call)
_NO_POLLS: ContextVar[bool] = ContextVar("tilesparse_no_polls", default=False)


def polling() -> bool:
    """Whether an op's call polls its device-side error records (not inside a padded call)."""
    return not _NO_POLLS.get()


@contextmanager
def _no_polls() -> Iterator[None]:
    token = _NO_POLLS.set(True)
    try:
        yield
    finally:
        _NO_POLLS.reset(token)
