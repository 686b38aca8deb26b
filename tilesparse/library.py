"""The compiled op as ``torch.library`` custom ops, so ``torch.compile(fullgraph=True)`` traces a
model that calls it without graph breaks.

The ops, opaque to the compiler:

- ``tilesparse::decide(q, k, key) -> Tensor[]``: the spec's decisions (its fields in
  ``DECISION_FIELDS`` order); its fake implementation runs the criteria on fake tensors, so
  shapes and dtypes are the real ones (``tilesparse::decide_seeded``: the same for an op with
  its own generator, tagged ``cudagraph_unsafe``);
- ``tilesparse::attention(q, k, v, decisions, key, trusted, scale, key_padding_mask,
  document_ids, max_documents) -> (Tensor, Tensor)``: the planned call, with the SDPA-style
  arguments of :mod:`tilesparse.sdpa_call` where the call has them (what the transformers
  integration passes); the output, and a one-byte token. Its backward is
  ``tilesparse::attention_backward``, which differentiates the forward's own autograd graph:
  the forward runs the eager call under autograd and keeps its graph in :data:`SAVED`, keyed
  by the token's address and dropped with the token (which autograd saves for the backward),
  so nothing is computed twice. Where that graph cannot be kept (the forward ran inside CUDA
  graphs: a capture, or torch.compile's ``reduce-overhead`` trees), or was already used (a
  second backward), the backward recomputes the forward and differentiates that
  (FlashAttention's recomputation, applied to the whole op).

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

__all__ = ["LIVE", "SAVED", "decision_names", "register"]

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


def _call(q: Tensor, k: Tensor, v: Tensor, decisions: list[Tensor], key: str, trusted: bool, *call) -> Tensor:
    """The eager call; ``call``: scale, key_padding_mask, document_ids, max_documents (None
    where not given)."""
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


# token address -> (q, k, v leaves, output): the autograd graph of a forward, for its backward
SAVED: dict[int, tuple[list[Tensor], Tensor]] = {}


def _token(device: torch.device) -> Tensor:
    return torch.empty(1, dtype=torch.uint8, device=device)


def _recorded(q: Tensor, k: Tensor, v: Tensor, *rest) -> tuple[list[Tensor], Tensor]:
    """The eager call on leaves of q, k, v, under autograd: the leaves and the output."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with _autograd_on():
        out = _call(*leaves, *rest)
    return leaves, out


def _in_cuda_graphs(device: torch.device) -> bool:
    """Whether this forward runs inside a CUDA graph capture, or inside torch.compile's CUDA
    graph trees (``mode="reduce-overhead"``) while they warm up or record: their replays run no
    Python, and their warm-up refuses allocations in the graphs' memory that outlive it, as a
    kept graph would. The trees' state is torch's internal one; where it cannot be read, the
    answer is yes (the backward then recomputes: slower, never wrong)."""
    if device.type != "cuda":
        return False
    if torch.cuda.is_current_stream_capturing():
        return True
    try:
        if not torch._C._is_key_in_tls("tree_manager_containers"):
            return False  # no CUDA graph tree on this thread
        from torch._inductor import cudagraph_trees

        manager = cudagraph_trees.get_manager(device.index or 0, create_if_none_exists=False)
        return manager is not None and (manager.in_warmup or manager.in_recording)
    except Exception:  # noqa: BLE001 - another torch's internals: take the safe path
        return True


def _attention(q: Tensor, k: Tensor, v: Tensor, *rest) -> tuple[Tensor, Tensor]:
    token = _token(q.device)
    if _in_cuda_graphs(q.device):
        return _call(q, k, v, *rest), token  # the backward recomputes
    leaves, out = _recorded(q, k, v, *rest)
    key = token.data_ptr()
    SAVED[key] = (leaves, out)
    weakref.finalize(token, SAVED.pop, key, None)  # the graph lives as long as the token
    return out.detach(), token


attention = torch.library.custom_op(
    "tilesparse::attention", _attention, mutates_args=(), schema=f"({_ATTENTION_ARGS}) -> (Tensor, Tensor)"
)


@attention.register_fake
def _attention_fake(q, k, v, *rest):
    return torch.empty_like(q, memory_format=torch.contiguous_format), _token(q.device)


def _attention_backward(
    grad: Tensor, token: Tensor, q: Tensor, k: Tensor, v: Tensor, *rest
) -> tuple[Tensor, Tensor, Tensor]:
    saved = SAVED.pop(token.data_ptr(), None)
    leaves, out = saved if saved is not None else _recorded(q, k, v, *rest)
    with _autograd_on():
        dq, dk, dv = torch.autograd.grad(out, leaves, grad)
    return dq.contiguous(), dk.contiguous(), dv.contiguous()


attention_backward = torch.library.custom_op(
    "tilesparse::attention_backward", _attention_backward, mutates_args=(),
    schema=f"(Tensor grad, Tensor token, {_ATTENTION_ARGS}) -> (Tensor, Tensor, Tensor)",
)  # fmt: skip


@attention_backward.register_fake
def _attention_backward_fake(grad, token, q, k, v, *args):
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
    ctx.save_for_backward(output[1], q, k, v, *decisions)
    ctx.key, ctx.trusted, ctx.n = key, trusted, len(decisions)
    ctx.call = call  # scale, key_padding_mask, document_ids, max_documents: no gradients


def _backward(ctx, grad, _token_grad):
    token, q, k, v, *decisions = ctx.saved_tensors
    dq, dk, dv = attention_backward(grad, token, q, k, v, decisions, ctx.key, ctx.trusted, *ctx.call)
    return dq, dk, dv, [None] * ctx.n, None, None, None, None, None, None


attention.register_autograd(_backward, setup_context=_setup_context)


def _no_second_derivative(ctx, *grads):
    raise RuntimeError(
        "tilesparse: under torch.compile the op's backward pass is first order only; a second derivative "
        "(differentiating gradients taken with create_graph=True) is not supported"
    )


attention_backward.register_autograd(_no_second_derivative)
