"""The compiled op as ``torch.library`` custom ops, so ``torch.compile(fullgraph=True)`` traces a
model that calls it without graph breaks.

The ops, opaque to the compiler:

- ``tilesparse::decide(q, k, key) -> Tensor[]``: the spec's decisions (its fields in
  ``DECISION_FIELDS`` order); its fake implementation runs the criteria on fake tensors, so
  shapes and dtypes are the real ones (``tilesparse::decide_seeded``: the same for an op with
  its own generator, tagged ``cudagraph_unsafe``);
- ``tilesparse::attention(q, k, v, decisions, key, trusted, scale, key_padding_mask,
  document_ids, max_documents) -> Tensor``: the planned call, with the SDPA-style arguments
  of :mod:`tilesparse.sdpa_call` where the call has them (what the transformers integration
  passes). Its backward is ``tilesparse::attention_backward``, which recomputes the forward under
  autograd and differentiates it (FlashAttention's recomputation, applied to the whole op:
  one extra forward per backward, the price of one op for every backend).

The forward's own autograd graph is not kept for the backward: it would hold the op's inputs
and output behind the compiler's back, and inductor may reuse the memory of a buffer it sees
no further use of (the output once consumed, an input it recomputes for the backward). A kept
graph gave wrong gradients under inductor where the returned output shared memory with the
graph's saved one (PerHead and Hybrid on the Triton kernels, tests/gpu/test_planner_gpu.py);
recomputing reads only what the backward op receives.

The spec and plan are not tensors: ``key`` names a live :class:`~tilesparse.CompiledAttention`
in :data:`LIVE` (weakly held). Eager calls never pass through here (no dispatch overhead, no
recomputation): ``CompiledAttention.__call__`` takes this path only while dynamo traces it.
"""

import contextlib
import itertools
import weakref

import torch
from torch import Tensor

from .patterns import DECISION_FIELDS, Decisions
from .sdpa_call import SdpaCall, run_sdpa_call

__all__ = ["LIVE", "decision_names", "register"]

LIVE: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_IDS = itertools.count()


def register(attn) -> str:
    """The key under which the ops find ``attn``."""
    key = f"attn{next(_IDS)}"
    LIVE[key] = attn
    return key


def _attn(key: str):
    attn = LIVE.get(key)
    if attn is None:
        raise RuntimeError(f"tilesparse op {key!r}: its CompiledAttention no longer exists")
    return attn


def decision_names(spec) -> list[str]:
    """The spec's decision fields in the ops' order."""
    return [n for n in DECISION_FIELDS if n in spec.decision_fields]


def to_decisions(names: list[str], tensors: list[Tensor]) -> Decisions:
    return Decisions(**dict(zip(names, tensors, strict=True)))


def no_autocast(device: torch.device):
    """Kernels run in the inputs' dtype: autocast's casts happened before the op."""
    if torch.is_autocast_enabled(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


# no `from __future__ import annotations` here: custom_op reads these annotations as types
def _decide(q: Tensor, k: Tensor, key: str) -> list[Tensor]:
    attn = _attn(key)
    dec = attn.decide(q, k)
    return [getattr(dec, n) for n in decision_names(attn.spec)]


decide = torch.library.custom_op("tilesparse::decide", _decide, mutates_args=())
decide.register_fake(_decide)  # the criteria are torch ops: on fake tensors they give the real shapes

# The same for an op that owns its generator (``seed``): a CUDA graph replays only the draws of
# generators registered with it, which torch.compile's CUDA graphs do for torch's default
# generators alone, so this op is marked unsafe to capture: under mode="reduce-overhead" it
# runs outside the graphs (the rest is still captured where inductor partitions the graph)
decide_seeded = torch.library.custom_op(
    "tilesparse::decide_seeded", _decide, mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,)
)
decide_seeded.register_fake(_decide)


# the attention op's arguments, written once for it and its backward (an explicit schema: the
# functions below take the SDPA-style tail as *call)
_ATTENTION_ARGS = (
    "Tensor q, Tensor k, Tensor v, Tensor[] decisions, str key, bool trusted, "
    "float? scale, Tensor? key_padding_mask, Tensor? document_ids, int? max_documents"
)


def _attention(q: Tensor, k: Tensor, v: Tensor, decisions: list[Tensor], key: str, trusted: bool, *call) -> Tensor:
    """``call``: scale, key_padding_mask, document_ids, max_documents (None where not given)."""
    attn = _attn(key)
    dec = to_decisions(decision_names(attn.spec), decisions)
    if trusted:
        dec = dec.trusted(attn.spec)
    dec = dec if decisions else None
    scale, key_padding_mask, document_ids, max_documents = call
    sdpa = SdpaCall(scale, key_padding_mask, document_ids, max_documents=max_documents)
    with no_autocast(q.device):
        if sdpa.plain:
            return attn._eager(q, k, v, dec, None, keep_last=False).contiguous()
        return run_sdpa_call(attn, q, k, v, sdpa, dec, None, keep_last=False).contiguous()


attention = torch.library.custom_op(
    "tilesparse::attention", _attention, mutates_args=(), schema=f"({_ATTENTION_ARGS}) -> Tensor"
)


@attention.register_fake
def _attention_fake(q, k, v, *rest):
    return torch.empty_like(q, memory_format=torch.contiguous_format)


def _attention_backward(grad: Tensor, q: Tensor, k: Tensor, v: Tensor, *rest) -> tuple[Tensor, Tensor, Tensor]:
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with _autograd_on():
        out = _attention(*leaves, *rest)
    dq, dk, dv = torch.autograd.grad(out, leaves, grad)
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


attention_backward = torch.library.custom_op(
    "tilesparse::attention_backward", _attention_backward, mutates_args=(),
    schema=f"(Tensor grad, {_ATTENTION_ARGS}) -> (Tensor, Tensor, Tensor)",
)  # fmt: skip


@attention_backward.register_fake
def _attention_backward_fake(grad, q, k, v, *args):
    return tuple(torch.empty_like(t, memory_format=torch.contiguous_format) for t in (q, k, v))


def _autograd_on():
    """Record autograd inside an op's implementation, which runs below the autograd keys (the
    custom-op machinery excludes them; the recomputation needs them back)."""
    C = torch._C
    exclude = C._dispatch_tls_local_exclude_set()
    for key in (C.DispatchKey.AutogradFunctionality, C.DispatchKey.AutogradOther, C.DispatchKey.AutogradNestedTensor):
        exclude = exclude.remove(key)
    stack = contextlib.ExitStack()
    stack.enter_context(C._ForceDispatchKeyGuard(C._dispatch_tls_local_include_set(), exclude))
    stack.enter_context(torch.enable_grad())
    return stack


def _setup_context(ctx, inputs, output):
    q, k, v, decisions, key, trusted, *call = inputs
    ctx.save_for_backward(q, k, v, *decisions)
    ctx.key, ctx.trusted, ctx.n = key, trusted, len(decisions)
    ctx.call = call  # scale, key_padding_mask, document_ids, max_documents: no gradients


def _backward(ctx, grad):
    q, k, v, *decisions = ctx.saved_tensors
    dq, dk, dv = attention_backward(grad, q, k, v, decisions, ctx.key, ctx.trusted, *ctx.call)
    return dq, dk, dv, [None] * ctx.n, None, None, None, None, None, None


attention.register_autograd(_backward, setup_context=_setup_context)


def _no_second_derivative(ctx, *grads):
    raise RuntimeError(
        "tilesparse: under torch.compile the op's backward pass is first order only; a second derivative "
        "(differentiating gradients taken with create_graph=True) is not supported"
    )


attention_backward.register_autograd(_no_second_derivative)
