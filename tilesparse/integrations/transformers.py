"""Hugging Face ``transformers``: a tilesparse pattern as an attention implementation.

::

    from tilesparse.integrations.transformers import register
    register("tilesparse-hash16", ts.Hash(buckets=16))
    model = AutoModelForCausalLM.from_config(config, attn_implementation="tilesparse-hash16")

``register`` adds one function to ``transformers.AttentionInterface`` and a mask builder
(:func:`padding_mask`) under the same name to ``AttentionMaskInterface``, so models hand it
their padding as a (B, T) key-padding mask (SDPA's 4D mask where the model's mask is more than
causality and padding). Per call it takes what the model passes:

- ``scaling``: the module's softmax scale (the call's ``scale=``);
- grouped-query attention: k and v stay (B, Hkv, T, D), never repeated;
- causality: the module's ``is_causal`` (or the ``is_causal`` keyword) picks a causal or a
  non-causal op;
- the attention mask: the key padding (from :func:`padding_mask`), or a boolean (B, 1, T, T)
  mask that is key padding AND causality (what ``sdpa_mask`` builds for a padded batch;
  checked on the host, a synchronization), becomes the op's exact ``key_padding_mask``; any
  other mask (packed sequences found from ``position_ids``, chunked or bidirectional parts) is
  refused, naming what differs. A row whose keys are all padding outputs zeros;
- dropout: p > 0 is refused (the op has no attention dropout; set ``attention_dropout=0``);
- sliding windows (``sliding_window`` set, as Mistral's default config) and logit soft-capping
  are refused;
- output: (B, T, H, D), as the model's ``o_proj`` expects, and no attention weights.

Per-layer patterns: ``layers`` maps a layer index to its spec (a dict, missing layers take
``spec``; or a callable ``layer_idx -> spec``); a ``None`` spec keeps that layer dense
(``Dense()``, which the planner runs through SDPA), e.g. ``layers=lambda i: None if i < 2 else
ts.Hash(buckets=16)`` keeps the first two layers dense.

Randomness: each layer's op owns a generator seeded ``seed + layer_idx``. ``resample="train"``
(the default) draws fresh decisions every call while the module trains (SCFA resamples its
rotations per step) and the same ones every call in ``eval()``, so two identical evaluation
forwards agree; ``True``/``False`` force either.

``generate()`` works with and without Hugging Face's KV cache: a cached step is the op with
queries shorter than keys (query i at position Tk - Tq + i), reading the cache's dense K and V;
in ``eval()`` its decisions repeat, so LSH buckets of a token are the same in every step.
Needs ``pip install tilesparse[transformers]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal

import torch
from torch import Tensor

from .. import api
from ..patterns import Dense, SpecBase, parse_spec

__all__ = ["key_padding_from_mask", "padding_mask", "register"]

LayerSpecs = Mapping[int, "SpecBase | dict | str | None"] | Callable[[int], "SpecBase | dict | str | None"] | None


def register(
    name: str,
    spec: SpecBase | dict | str,
    *,
    layers: LayerSpecs = None,
    backend: str = "auto",
    seed: int = 0,
    resample: bool | Literal["train"] = "train",
    cuda_graphs: bool = False,
) -> Callable:
    """Register ``spec`` under ``name`` with ``transformers.AttentionInterface`` (and SDPA's
    mask builder with ``AttentionMaskInterface``); returns the attention function.
    ``cuda_graphs``: each layer's op replays its calls from CUDA graphs (:mod:`tilesparse.graphs`)."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:  # pragma: no cover - exercised where transformers is missing
        raise ImportError(
            "tilesparse.integrations.transformers needs transformers: pip install 'tilesparse[transformers]'"
        ) from e
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if resample not in (True, False, "train"):
        raise ValueError(f"resample must be True, False or 'train', got {resample!r}")
    if not isinstance(cuda_graphs, bool):
        raise TypeError(f"cuda_graphs must be a bool, got {cuda_graphs!r}")
    base = parse_spec(spec)
    if layers is not None and not (callable(layers) or isinstance(layers, Mapping)):
        raise TypeError(
            f"layers must be a dict {{layer_idx: spec}} or a callable layer_idx -> spec, got {type(layers).__name__}"
        )
    ops: dict[tuple[int, bool], api.CompiledAttention] = {}

    def op_for(layer: int, causal: bool) -> api.CompiledAttention:
        op = ops.get((layer, causal))
        if op is None:
            s = base
            if layers is not None:
                s = layers(layer) if callable(layers) else layers.get(layer, base)
            s = Dense() if s is None else parse_spec(s)
            op = ops[(layer, causal)] = api.compile(
                s, causal=causal, backend=backend, seed=seed + layer, cuda_graphs=cuda_graphs
            )
        return op

    def attention(
        module: torch.nn.Module,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        attention_mask: Tensor | None,
        scaling: float | None = None,
        dropout: float = 0.0,
        **kwargs,
    ) -> tuple[Tensor, None]:
        causal = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", True) if causal is None else causal)
        _refuse(name, module, query, key, dropout, kwargs)
        op = op_for(int(getattr(module, "layer_idx", 0) or 0), causal)
        op.resample = module.training if resample == "train" else resample
        B, Tq, Tk = query.shape[0], query.shape[2], key.shape[2]
        kpm = key_padding_from_mask(attention_mask, causal=causal, batch=B, q_len=Tq, k_len=Tk)
        out = op(query, key, value, scale=scaling, key_padding_mask=kpm)
        return out.transpose(1, 2).contiguous(), None

    attention.ops = ops  # the compiled op of each (layer, causal), for inspection
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, padding_mask)
    return attention


def padding_mask(
    batch_size: int,
    q_length: int,
    kv_length: int,
    q_offset: int = 0,
    kv_offset: int = 0,
    mask_function: Callable | None = None,
    attention_mask: Tensor | None = None,
    local_size: int | None = None,
    **kwargs,
) -> Tensor | None:
    """The mask builder ``register`` installs (``AttentionMaskInterface``, SDPA's arguments).

    Where the model's mask is plain causality or no mask at all (no sliding window, no packed
    sequences, no extra mask function) and the queries are the last ``q_length`` of the
    ``kv_length`` keys, it returns the key-padding mask itself, (B, Tk) under a causal mask and
    (B, 1, Tk) under a bidirectional one (so the attention function can check the module's
    causality against it), or None without padding: the op applies causality and padding as
    predicates, so no (Tq, Tk) mask is built and nothing is read back to check one (under
    ``torch.compile`` too, where transformers never skips building SDPA's mask). Anything else
    gets SDPA's boolean 4D mask, which the attention function checks and refuses unless it is
    key padding AND causality.
    """
    from transformers.masking_utils import (
        bidirectional_mask_function,
        causal_mask_function,
        prepare_padding_mask,
        sdpa_mask,
    )

    mask_function = causal_mask_function if mask_function is None else mask_function
    causal = mask_function is causal_mask_function
    plain = causal or mask_function is bidirectional_mask_function
    aligned = kv_offset == 0 and (not causal or q_offset + q_length == kv_length)
    if plain and local_size is None and aligned:
        pad = prepare_padding_mask(attention_mask, kv_length, kv_offset)
        if pad is None:
            return None
        pad = pad[:, :kv_length].to(torch.bool)
        return pad if causal else pad[:, None, :]
    return sdpa_mask(
        batch_size, q_length, kv_length, q_offset, kv_offset, mask_function, attention_mask, local_size, **kwargs
    )  # fmt: skip


def _refuse(name: str, module, query: Tensor, key: Tensor, dropout: float, kwargs: dict) -> None:
    """Clear errors for what the op does not compute."""
    if kwargs.get("sliding_window") is not None:
        raise ValueError(
            f"attn_implementation={name!r}: sliding_window={kwargs['sliding_window']} is not supported "
            "(no window predicate); set config.sliding_window=None (or use_sliding_window=False)"
        )
    if kwargs.get("softcap") is not None:
        raise ValueError(
            f"attn_implementation={name!r}: softcap={kwargs['softcap']} (logit soft-capping) is not supported"
        )
    if dropout and dropout > 0:
        raise ValueError(
            f"attn_implementation={name!r}: attention dropout={dropout} in training mode is not supported; "
            "set config.attention_dropout=0.0"
        )


def key_padding_from_mask(mask: Tensor | None, *, causal: bool, batch: int, q_len: int, k_len: int) -> Tensor | None:
    """The (B, Tk) key-padding mask that ``mask`` (a boolean (B, 1, Tq, Tk) mask, True keeps)
    is, given the causality: None when ``mask`` is None. Raises when ``mask`` is anything but
    key padding AND (when causal) causality."""
    if mask is None:
        return None
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        raise ValueError(
            f"attention mask of dtype {getattr(mask, 'dtype', type(mask).__name__)}: expected a boolean mask "
            "from the mask builder register() installs (padding_mask)"
        )
    if mask.dim() in (2, 3):  # key padding itself (padding_mask): (B, Tk) causal, (B, 1, Tk) bidirectional
        built_causal = mask.dim() == 2
        if built_causal != causal:
            built, other = ("causal", "bidirectionally") if built_causal else ("bidirectional", "causally")
            raise ValueError(
                f"the model built a {built} mask but the attention module has is_causal={causal}: "
                f"the op would attend {other}"
            )
        kpm = mask if built_causal else mask[:, 0]
        if tuple(kpm.shape) != (batch, k_len):
            raise ValueError(f"key-padding mask of shape {tuple(mask.shape)}: expected (B={batch}, Tk={k_len})")
        return kpm.contiguous()
    if mask.dim() != 4 or tuple(mask.shape[1:]) != (1, q_len, k_len) or mask.shape[0] not in (1, batch):
        raise ValueError(
            f"attention mask of shape {tuple(mask.shape)}: expected (B={batch}, 1, Tq={q_len}, Tk={k_len})"
        )
    mask = mask.expand(batch, 1, q_len, k_len)
    kpm = mask[:, 0, -1, :] if causal else mask[:, 0, 0, :]
    want = kpm[:, None, None, :]
    if causal:
        i = torch.arange(q_len, device=mask.device)[:, None] + (k_len - q_len)
        want = want & (torch.arange(k_len, device=mask.device)[None, :] <= i)
    if not torch.equal(mask, want.expand_as(mask)):
        raise ValueError(
            "the attention mask is not key padding AND causality (packed sequences from position_ids, a "
            "chunked or bidirectional mask?): only padding masks are supported; for packed documents call "
            "the op with document_ids="
        )
    return kpm.contiguous()
