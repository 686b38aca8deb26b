"""Calls replayed from CUDA graphs: ``compile(spec, cuda_graphs=True)``.

Where a call is bound by the host (short sequences, few heads), most of its time is Python and
kernel launches. With ``cuda_graphs=True`` the op captures its calls once per *call signature*
and replays them after: the same steps the eager call runs (``tilesparse.execute``, or
``tilesparse.sdpa_call`` with key padding and document ids), recorded by ``torch.cuda.graph``.

- **Signature.** Shapes, strides, dtypes and device of q, k, v, of the given decisions' tensors
  (or: the op decides) and of the key padding mask and document ids, the scale and
  ``max_documents``, which inputs require grad, whether grad mode is on, inference mode, the
  current stream. Another signature captures anew; the plan cache is unchanged by this.
- **Slots.** A capture holds static q, k, v, decisions, mask and ids, the forward graph and (when the call
  needs gradients) the backward graph, each slot in a memory pool of its own. A call copies its
  tensors into a free slot's, replays, and returns a copy of the output; the
  backward copies the incoming gradient in, replays and returns copies of the gradients. A slot
  needing gradients stays busy from its forward until its backward ran (or its autograd graph
  was freed without one), so calls outstanding at once (the layers of a training step) take one
  slot each: a slot per layer, captured in the first step. Each slot keeps its call's peak
  memory (index tensors, the backward's buffers) until ``clear_graphs()`` (the op warns at
  :data:`MANY_SLOTS`): meant for the short sequences where the host dominates, not for long
  ones, and for a few signatures (varying lengths add slots).
- **What still runs eagerly** (counted in :attr:`GraphStats.eager` by reason): calls on other
  devices than CUDA, under ``torch.compile`` (which captures on its own) or inside another
  capture, with ``return_lse=True``, with document ids but no ``max_documents`` (their range is
  read back), and with a cache.
- **Decisions.** Given decisions are copied in and checked on the device in the replay (as a
  GPU call with ``validate=True`` checks any decisions it did not make itself); a bad id
  surfaces at the op's next call or at :func:`tilesparse.check_errors`, whose poll each
  replayed call runs too. Decisions the op makes draw as the eager call would: from torch's
  generator (which every capture registers), or from the generator the eager call would use
  (the call's ``generator=``, the op's own for ``seed=``, a freshly seeded one for
  ``resample=False``), whose state a replay hands to the slot's own registered generator and
  takes back after, so the draws and the generator's advance are the eager call's.

The backward is first order only, as the kernels' own. On a CPU the slot logic is tested with a
recorder that reruns the captured function instead of a CUDA graph (``tests/test_graphs.py``).
"""

from __future__ import annotations

import collections
import gc
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from .backends.first_order import first_order_only
from .patterns import DECISION_FIELDS, Decisions
from .sdpa_call import PLAIN, SdpaCall

__all__ = ["MANY_SLOTS", "Capture", "CudaGraphRecorder", "GraphStats", "GraphedCalls", "RerunRecorder"]

# slots held by one op at which it warns (each keeps its call's memory)
MANY_SLOTS = 32

# warm-up calls on a side stream before a capture: the first plans, compiles the kernels and
# allocates the op's error records; the second runs as every later call does
_WARMUP = 2


@dataclass
class GraphStats:
    """How the op's calls ran: ``captures`` (slots made), ``replays``, and ``eager``: calls that
    ran eagerly, by reason."""

    captures: int = 0
    replays: int = 0
    eager: collections.Counter = field(default_factory=collections.Counter)


@dataclass
class Capture:
    """What a recorder made of a call: ``forward()`` replays into ``out``; ``backward()`` (None
    without gradients) replays the backward on the slot's incoming gradient into ``grads``."""

    forward: Callable[[], None]
    out: Tensor
    backward: Callable[[], None] | None = None
    grads: tuple[Tensor, ...] = ()


class CudaGraphRecorder:
    """Warms a call up on a side stream, then records its forward and backward into two CUDA
    graphs sharing one memory pool of their own (as ``torch.cuda.make_graphed_callables``)."""

    def __init__(self, device: torch.device, generators: tuple[torch.Generator, ...] = ()):
        self.device = device
        self.generators = generators  # registered with both graphs (torch's default is by itself)

    def capture(self, forward: Callable[[], Tensor], backward: Callable[[Tensor], tuple] | None) -> Capture:
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for _ in range(_WARMUP):
                out = forward()
                if backward is not None:
                    backward(out)
        torch.cuda.current_stream(self.device).wait_stream(stream)
        del out
        gc.collect()  # a collection inside a capture that frees another graph's tensors breaks it
        pool = torch.cuda.graph_pool_handle()
        try:  # the warm-up ran the same calls: what fails now is the capture
            fwd = self._graph()
            with torch.cuda.graph(fwd, pool=pool):
                out = forward()
            if backward is None:
                return Capture(fwd.replay, out)
            bwd = self._graph()
            with torch.cuda.graph(bwd, pool=pool):
                grads = backward(out)
        except RuntimeError as e:
            raise RuntimeError(
                f"capturing this call in a CUDA graph failed: {e}; compile the op without cuda_graphs=True"
            ) from e
        return Capture(fwd.replay, out, bwd.replay, grads)

    def _graph(self) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        for gen in self.generators:
            graph.register_generator_state(gen)
        return graph


class RerunRecorder:
    """A stand-in for :class:`CudaGraphRecorder` where there is no GPU: a replay runs the call
    again on the slot's tensors and copies its results into the tensors the capture returned,
    which stay fixed buffers as a graph's are. The backward reruns the forward first, on the
    slot's inputs (which hold the call's own until its backward ran), with the generators (the
    given ones and torch's default, as a graph registers them) where the forward's replay found
    them, then puts them back."""

    def __init__(self, device: torch.device | None = None, generators: tuple[torch.Generator, ...] = ()):
        self.generators = (*generators, torch.default_generator)
        self.at_forward: list[Tensor] = []

    def capture(self, forward: Callable[[], Tensor], backward: Callable[[Tensor], tuple] | None) -> Capture:
        out = forward()

        def replay_forward():
            self.at_forward = [g.get_state() for g in self.generators]
            with torch.no_grad():
                out.copy_(forward())

        if backward is None:
            return Capture(replay_forward, out)
        grads = tuple(g.detach() for g in backward(out))

        def replay_backward():
            now = [g.get_state() for g in self.generators]
            for g, state in zip(self.generators, self.at_forward, strict=True):
                g.set_state(state)
            with torch.enable_grad():
                fresh = backward(forward())
            for g, state in zip(self.generators, now, strict=True):
                g.set_state(state)
            with torch.no_grad():
                for fixed, g in zip(grads, fresh, strict=True):
                    fixed.copy_(g)

        return Capture(replay_forward, out.detach(), replay_backward, grads)


def _signature(t: Tensor) -> tuple:
    return (tuple(t.shape), t.stride(), t.dtype, t.device)


def _raw_stream(index: int) -> int:
    """The current stream's handle on CUDA device ``index`` (one C call: part of a replay's host time)."""
    return torch._C._cuda_getCurrentRawStream(index)


class _Slot:
    """One capture: static inputs and decisions, the graphs, their outputs; ``holder`` is the
    lease of the call whose backward it awaits (a weak reference; free when None or dead)."""

    def __init__(self):
        self.inputs: tuple[Tensor, ...] = ()
        self.decisions: dict[str, Tensor] = {}
        self.extras: dict[str, Tensor] = {}  # the call's key padding mask and document ids
        self.forward: Callable[[], None] | None = None
        self.out: Tensor | None = None
        self.backward: Callable[[], None] | None = None
        self.grad_out: Tensor | None = None
        self.grads: tuple[Tensor | None, ...] = ()
        self.holder: weakref.ref | None = None
        self.copies: list[tuple[list[Tensor], list[int]]] = []
        self.generator: torch.Generator | None = None  # the slot's own, registered with its graphs

    def free(self) -> bool:
        return self.holder is None or self.holder() is None

    def copy_in(self, tensors: tuple[Tensor, ...], decisions: Decisions | None, call: SdpaCall) -> None:
        """The call's q, k, v, decisions, key padding and document ids into the slot's: one fused
        copy per dtype."""
        sources = [*tensors, *(getattr(decisions, n) for n in self.decisions)]
        sources += [getattr(call, n) for n in self.extras]
        with torch.no_grad():
            for targets, picks in self.copies:
                torch._foreach_copy_(targets, [sources[i] for i in picks])

    def replay_forward(self, tensors: tuple[Tensor, ...], decisions: Decisions | None, call: SdpaCall,
                       generator: torch.Generator | None) -> Tensor:  # fmt: skip
        """The call's tensors in, the forward replayed, a copy of its output out. The replay draws
        from ``generator`` as the eager call would: its state to the slot's generator first, the
        slot's (advanced by the draws) back after."""
        self.copy_in(tensors, decisions, call)
        if self.generator is None:
            self.forward()
        else:
            self.generator.set_state(generator.get_state())
            self.forward()
            generator.set_state(self.generator.get_state())
        return self.out.clone()

    def plan_copies(self) -> None:
        """Group the slot's inputs and decisions by dtype for :meth:`copy_in`."""
        groups: dict[torch.dtype, tuple[list[Tensor], list[int]]] = {}
        for i, t in enumerate((*self.inputs, *self.decisions.values(), *self.extras.values())):
            targets, picks = groups.setdefault(t.dtype, ([], []))
            targets.append(t)
            picks.append(i)
        self.copies = list(groups.values())


def _copies(tensors: tuple[Tensor | None, ...]) -> tuple[Tensor | None, ...]:
    """Copies of ``tensors`` in one fused copy (Nones stay None)."""
    real = [t for t in tensors if t is not None]
    out = [torch.empty_like(t) for t in real]
    torch._foreach_copy_(out, real)
    it = iter(out)
    return tuple(None if t is None else next(it) for t in tensors)


class _Lease:
    """A training slot's hold, owned by the call's autograd node: released by its backward, or
    when the node is freed without one (the output dropped: the slot holds only a weak
    reference)."""

    def __init__(self, slot: _Slot):
        self.slot = slot
        slot.holder = weakref.ref(self)

    def holds(self) -> bool:
        return self.slot.holder is not None and self.slot.holder() is self

    def release(self) -> None:
        if self.holds():
            self.slot.holder = None


class GraphedCalls:
    """The replay path of one :class:`tilesparse.CompiledAttention` (see the module docstring).

    ``run(q, k, v, decisions, generator, call)`` runs a call: ``eager(q, k, v, decisions,
    generator, call)`` is the op's eager call, which a capture records; ``generator`` is the one
    the eager call draws from (None: torch's default); ``call`` its SDPA-style arguments;
    ``recorder`` makes a recorder for a device and the generators to register (default:
    :class:`CudaGraphRecorder`)."""

    def __init__(self, eager: Callable[..., Tensor], *, recorder: Callable[..., object] | None = None):
        self.eager = eager
        self.recorder = recorder or CudaGraphRecorder
        self.slots: dict[tuple, list[_Slot]] = {}
        self.stats = GraphStats()

    def slot_count(self) -> int:
        return sum(len(s) for s in self.slots.values())

    def clear(self) -> None:
        """Forget every slot: their memory goes back once no call still awaits a backward from
        one (such a call's autograd node holds its slot until then)."""
        self.slots.clear()

    def run(
        self, q: Tensor, k: Tensor, v: Tensor, decisions: Decisions | None, generator: torch.Generator | None,
        call: SdpaCall = PLAIN,
    ) -> Tensor:
        inputs = (q, k, v)
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in inputs)
        stream = _raw_stream(q.device.index) if q.device.type == "cuda" else 0
        key = (
            tuple(_signature(t) for t in inputs), tuple(t.requires_grad for t in inputs) if grad else None, stream,
            None if decisions is None else tuple(None if t is None else _signature(t) for _, t in decisions.items()),
            torch.is_inference_mode_enabled(),  # a slot made there holds inference tensors
            generator is None,  # torch's default generator, or a slot generator of its own
            call.scale, call.max_documents,
            *(None if t is None else _signature(t) for t in (call.key_padding_mask, call.document_ids)),
        )  # fmt: skip
        slots = self.slots.setdefault(key, [])
        slot = next((s for s in slots if s.free()), None)
        if slot is None:
            slot = self._capture(inputs, decisions, grad, generator, call)
            slots.append(slot)
            if self.slot_count() == MANY_SLOTS:
                warnings.warn(
                    f"this op now holds {MANY_SLOTS} CUDA graph slots, each keeping its call's memory: every "
                    "signature (shapes, strides, dtypes, grad) captures anew, so varying sequence lengths add "
                    "slots without bound; pad to a few lengths, or free them with the op's clear_graphs()",
                    stacklevel=3,
                )
        self.stats.replays += 1
        if not grad:
            return slot.replay_forward(inputs, decisions, call, generator)
        return _Replay.apply(slot, decisions, generator, call, *inputs)

    def _capture(
        self, inputs: tuple[Tensor, ...], decisions: Decisions | None, grad: bool, generator: torch.Generator | None,
        call: SdpaCall,
    ) -> _Slot:
        device = inputs[0].device
        slot = _Slot()
        slot.inputs = tuple(t.detach().clone().requires_grad_(grad and t.requires_grad) for t in inputs)
        if decisions is not None:
            slot.decisions = {n: t.clone() for n, t in decisions.items() if t is not None}
        static = None if decisions is None else Decisions(**{n: slot.decisions.get(n) for n in DECISION_FIELDS})
        extras = {n: getattr(call, n) for n in ("key_padding_mask", "document_ids")}
        slot.extras = {n: t.clone() for n, t in extras.items() if t is not None}
        static_call = replace(call, **slot.extras)
        slot.plan_copies()
        if generator is not None:
            slot.generator = torch.Generator(device)
            slot.generator.set_state(generator.get_state())
        recorder = self.recorder(device, () if slot.generator is None else (slot.generator,))
        live = [t for t in slot.inputs if t.requires_grad]

        def forward() -> Tensor:
            return self.eager(*slot.inputs, static, slot.generator, static_call)

        def backward(out: Tensor) -> tuple[Tensor, ...]:
            return torch.autograd.grad(out, live, slot.grad_out)

        if grad:
            slot.grad_out = torch.ones(inputs[0].shape, dtype=inputs[0].dtype, device=device)
        cap = recorder.capture(forward, backward if grad else None)
        slot.forward, slot.out, slot.backward = cap.forward, cap.out, cap.backward
        it = iter(cap.grads)
        slot.grads = tuple(next(it) if t.requires_grad else None for t in slot.inputs)
        self.stats.captures += 1
        return slot


class _Replay(torch.autograd.Function):
    """A training call's replay: forward graph in, a copy of the output out; the backward graph
    on the incoming gradient, copies of the gradients out."""

    @staticmethod
    def forward(ctx, slot: _Slot, decisions: Decisions | None, generator: torch.Generator | None, call: SdpaCall,
                *inputs: Tensor):  # fmt: skip
        out = slot.replay_forward(inputs, decisions, call, generator)
        ctx.lease = _Lease(slot)
        return out

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        lease: _Lease = ctx.lease
        slot = lease.slot
        if not lease.holds():
            raise RuntimeError(
                "a call replayed from a CUDA graph runs its backward once: its slot is free for the next call "
                "(backward with retain_graph=True twice is not supported with cuda_graphs=True)"
            )
        with torch.no_grad():
            slot.grad_out.copy_(grad_out)
            slot.backward()
            grads = _copies(slot.grads)
        lease.release()
        return None, None, None, None, *first_order_only("cuda graph replay", grads, slot.inputs)
