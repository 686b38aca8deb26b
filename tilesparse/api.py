"""The public entry point: ``compile(spec)`` returns a :class:`CompiledAttention`.

A call validates the inputs, takes the plan from the cache (keyed by dtype, device, head
counts, head dim, whether gradients are needed and the batch and sequence length rounded up to
powers of two: new decisions and new compacted lengths never re-plan) and executes the plan's
steps (``tilesparse.execute``): make or check the decisions, build each group's index, attend
each group on its backend, merge. Under ``torch.autocast`` q, k, v are cast to
the autocast dtype first (as SDPA is) and the kernels run without autocast. While dynamo
traces a call (``torch.compile``), the call becomes the custom ops of ``tilesparse.library``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor

from . import library
from .backends import BUILDERS, id_check_for
from .backends import REGISTRY as BACKENDS
from .backends.buffers import unpooled
from .backends.reference import feature_mask, masked_attention
from .decide import DeferredHash, bind_decisions, lsh_part, unbound_decide_on
from .execute import Decide, execute, keep_from_second_call, with_dense_heads
from .graphs import CudaGraphRecorder, GraphedCalls, GraphStats
from .inference import KVCache, attend_cached
from .ir import AttentionInputs, Prepared, PreparedGroup, check_inputs, check_scale, check_tensor_args, dense_mask, lower, tile_stats
from .patterns import Decisions, SpecBase, check_decisions, decision_errors, parse_spec
from .patterns.criteria import get_criterion
from .patterns.decision_errors import BoundChecks, DeviceErrors, poisoned
from .patterns.decisions import plain_tensor
from .patterns.specs import TopKFeatures
from .planner import Plan, make_plan
from .randomness import check_seed, op_generator
from .sdpa_call import (
    SdpaCall,
    check_sdpa_keywords,
    document_range,
    parse_sdpa_call,
    polling,
    reference_mask_mod,
    run_sdpa_call,
    with_sdpa_keywords,
)

__all__ = ["CompiledAttention", "PlanStats", "compile"]


@dataclass
class PlanStats:
    """How often a CompiledAttention planned: flat ``plans`` over a training loop means no
    per-step planning (``hits`` counts the calls served from the cache)."""

    plans: int = 0
    hits: int = 0


def compile(  # noqa: A001 - the library's verb, as in torch.compile
    spec: SpecBase | dict | str,
    *,
    causal: bool = True,
    scale: float | None = None,
    backend: str = "auto",
    validate: bool = True,
    seed: int | None = None,
    resample: bool = True,
    cuda_graphs: bool = False,
) -> CompiledAttention:
    """Compile a pattern spec into an exact attention op.

    ``causal`` adds j <= i; ``scale`` defaults to 1/sqrt(D); ``backend`` is "auto" or a
    registered name ("reference", "executor", "sdpa", "triton"), checked here. Given decisions
    have their ids checked before any index is built (skipped for ``decide()``'s own decisions
    while their tensors are unchanged), never with a device sync: on the CPU a bad id raises a
    ValueError in the call; on a GPU ``validate=True`` checks them on the device, clamps them
    for the index build, returns NaN from the call that met a bad id and raises the ValueError
    at the op's next call or from :func:`tilesparse.check_errors`
    (:mod:`tilesparse.patterns.decision_errors`); ``validate=False`` checks them there with a
    device-side assertion instead (which ends the CUDA context). ``seed``/``resample``: the op's own
    randomness (:mod:`tilesparse.randomness`; default: torch's global generator, fresh draws
    per call). ``cuda_graphs``: replay plain calls on CUDA from graphs captured per call
    signature (:mod:`tilesparse.graphs`: host time of a replay instead of the eager call's,
    for a slot's memory per call outstanding at once).
    """
    if not isinstance(cuda_graphs, bool):
        raise TypeError(f"cuda_graphs must be a bool, got {cuda_graphs!r}")
    attn = CompiledAttention(parse_spec(spec), causal=causal, scale=scale, backend=backend, validate=validate)
    attn.cuda_graphs = cuda_graphs
    check_seed(seed, resample)
    attn.seed, attn.resample = seed, resample
    return attn


class CompiledAttention:
    """An exact attention op for one pattern: ``attn(q, k, v)`` as F.sdpa(q, k, v, is_causal=...)."""

    def __init__(self, spec: SpecBase, *, causal: bool, scale: float | None, backend: str, validate: bool):
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        if not isinstance(backend, str):
            raise TypeError(f"backend must be a string, got {backend!r}")
        if backend != "auto" and backend not in BACKENDS:
            raise ValueError(f"backend must be 'auto' or a registered backend {sorted(BACKENDS)}, got {backend!r}")
        if not isinstance(validate, bool):
            raise TypeError(f"validate must be a bool, got {validate!r}")
        self.spec = spec
        self.causal = causal
        self.scale = check_scale(scale)
        self.backend = backend
        self.validate = validate
        self.seed: int | None = None  # op-owned randomness (tilesparse.randomness)
        self.resample = True
        self.program = lower(spec, causal=causal)
        # whether a registered (not built-in) criterion decides: its ids are checked per call;
        # computed once, here (dynamo does not trace pydantic's attribute lookups)
        self._user_criteria = _user_criteria(spec)
        self._read_spec()
        self._plans: dict[tuple, Plan] = {}
        self._signatures: dict[tuple, tuple[Plan, float] | None] = {}  # per call signature: its plan, scale
        self.stats = PlanStats()
        self._last: tuple[PreparedGroup, ...] = ()  # the last call's index tensors, for explain()
        self._key = library.register(self)
        self.cuda_graphs = False  # compile(cuda_graphs=True): plain calls replayed (tilesparse.graphs)

    @property
    def graph_stats(self) -> GraphStats | None:
        """With ``cuda_graphs=True``: captures, replays and the calls that ran eagerly, by reason."""
        return self._graphed().stats if self.cuda_graphs else None

    def clear_graphs(self) -> None:
        """With ``cuda_graphs=True``: drop every captured slot and the memory it keeps (a call
        still awaiting its backward keeps its own slot until then); later calls capture anew."""
        if "_graphs" in self.__dict__:
            self._graphs.clear()

    def _graphed(self) -> GraphedCalls:
        """The op's replay path (made on first use; process-local, not pickled)."""
        graphs = self.__dict__.get("_graphs")
        if graphs is None:
            graphs = self._graphs = GraphedCalls(self._captured_call)
        return graphs

    def _captured_call(self, q: Tensor, k: Tensor, v: Tensor, decisions, generator, call: SdpaCall) -> Tensor:
        """What a CUDA graph of this op records: the eager call (keeping no index tensors)."""
        if call.plain:
            return self._eager(q, k, v, decisions, generator, keep_last=False)
        return run_sdpa_call(self, q, k, v, call, decisions, generator, keep_last=False)

    def _replay_refusal(self, q: Tensor, decisions: Decisions | None, call: SdpaCall, generator) -> str | None:
        """Why a call cannot be replayed from a graph (None: it can)."""
        if self._graphed().recorder is CudaGraphRecorder and q.device.type != "cuda":
            return f"inputs on {q.device.type}, not CUDA"
        if generator is not None and generator.device.type != q.device.type:  # the eager call says what is wrong
            return f"a generator on {generator.device.type} for inputs on {q.device.type}"
        if q.device.type == "cuda" and torch._C._cuda_isCurrentStreamCapturing():
            return "inside another CUDA graph capture"
        if decisions is not None and not isinstance(decisions, Decisions):
            return "decisions not a tilesparse.Decisions"
        if call.return_lse:
            return "return_lse=True"
        if call.document_ids is not None and call.max_documents is None:
            return "document_ids without max_documents (their range is read back)"
        return None

    def __getstate__(self) -> dict:
        """Pickle, deepcopy and torch.save carry the spec and options, not the process-local
        parts: the plan cache, the last call's index tensors, the custom ops' registry key, the
        padded variants, the op's generators (a copy reseeds from ``seed``) and its device-side
        error records and their bound checks."""
        state = dict(self.__dict__)
        for name in ("_plans", "_signatures", "_last", "_key", "_variants", "_generators", "_errors", "_checks", "_graphs"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict) -> None:
        """A copy plans afresh and registers under a key of its own in this process: a key
        taken from another process (or from the original) could name another op here."""
        self.__dict__.update(state)
        self._read_spec()
        self._plans = {}
        self._signatures = {}
        self._last = ()
        self._key = library.register(self)

    def _read_spec(self) -> None:
        """What the given decisions are checked against, read off the (frozen) spec once."""
        self._needed = self.spec.decision_fields
        self._ranges = (_buckets(self.spec), _support_k(self.spec))

    def __repr__(self) -> str:
        return f"CompiledAttention({self.spec}, causal={self.causal}, backend={self.backend!r})"

    # -- decisions --------------------------------------------------------------------------

    def decide(self, q: Tensor, k: Tensor, *, generator: torch.Generator | None = None) -> Decisions:
        """The decisions the spec's criteria make for q (B, H, Tq, D) and k (B, Hkv, Tk, D)."""
        inputs = check_inputs(q, k, k, scale=self.scale)
        self._check_spec_fits(inputs)
        _check_generator(generator)
        return self._decide(inputs, generator)[0]

    def _decide(
        self, inputs: AttentionInputs, generator, fused=None, poison: list | None = None, memo: dict | None = None
    ) -> tuple[Decisions, DeferredHash | None]:
        """The spec's decisions (``tilesparse.decide``), trusted; ``fused``: the builder whose
        index build may hash the lsh buckets; ``memo``: the bound decide step's (its
        :func:`~tilesparse.decide.bind_decisions` is worked out once there). On a GPU a user
        criterion's ids are not read back (criteria.py): a call (``poison`` given) checks them
        here on the device, adding its poison to ``poison``; otherwise they come back
        untrusted, for the call that runs them."""
        # decisions are not differentiable: no autograd graph over the hashing or the top-k
        if generator is None:
            generator = op_generator(self, inputs.device)
        on_device = inputs.device.type in decision_errors.DEFERRED_DEVICES and self._user_criteria
        bound = memo is not None and plain_tensor(inputs.q)  # a traced call's fake tensors bind anew
        unbound = unbound_decide_on()  # the A/B switch: each of its states bound on its own
        decide = memo.get(unbound) if bound else None
        if decide is None:
            decide = bind_decisions(self.spec, inputs, check_ids=not on_device, in_call=bound)
            if bound:
                memo[unbound] = decide
        dec, deferred = decide(inputs, generator, fused)
        if not on_device:
            # a bound step's decisions stay inside the call (nothing checks them again): unmarked
            return (dec if bound and not unbound else dec.trusted(self.spec)), deferred
        return (dec if poison is None else self._check_on_device(dec, inputs, poison)), deferred

    def _decide_step(
        self, inputs: AttentionInputs, decisions: Decisions | None, generator, poison: list | None = None
    ) -> Decide:
        """The plan's decide step: the op's own decisions, or the given ones checked."""
        if decisions is None:
            return lambda fused, memo: self._decide(inputs, generator, fused, poison, memo)
        return lambda fused, memo: (self._decisions(inputs, decisions, generator, poison=poison), None)

    def _check_spec_fits(self, inputs: AttentionInputs) -> None:
        if bad := [h for h in getattr(self.spec, "dense_heads", ()) if h >= inputs.heads]:  # no tensor per call
            raise ValueError(f"PerHead.dense_heads {bad} out of range for {inputs.heads} query heads")
        for part in self.spec.decision_parts():  # PerHead's rest and a Hybrid's parts, nested too
            if isinstance(part, TopKFeatures) and part.k > inputs.head_dim:
                raise ValueError(f"TopKFeatures.k={part.k} exceeds the head dim D={inputs.head_dim}")

    def _decisions(
        self, inputs: AttentionInputs, decisions: Decisions | None, generator, *, host: bool = False,
        poison: list | None = None,
    ) -> Decisions:
        """The call's decisions, made or given and checked; ``poison`` collects the call's poison
        (:mod:`tilesparse.patterns.decision_errors`) when ids were checked on the device."""
        poison = [] if poison is None else poison
        if decisions is None:
            return self._decide(inputs, generator, poison=poison)[0]
        if not isinstance(decisions, Decisions):
            raise TypeError(f"decisions must be a tilesparse.Decisions (attn.decide(q, k) makes one), got {type(decisions).__name__}")
        # value checks: skipped only for decisions this spec's criteria made whose tensors are
        # unchanged since; on the CPU read back (no sync to save there); on a GPU with
        # validate=True on the device, clamped and reported later (decision_errors), with
        # validate=False by a device-side assertion; ``host`` forces the read-back
        checked = not decisions.trusted_for(self.spec)
        buckets, support_k = self._ranges
        # trusted: the structural checks alone, once per call sizes (``fit``)
        fit = None if checked else (self._needed, inputs.batch, inputs.heads, inputs.q_len, inputs.k_len,
                                    inputs.head_dim, inputs.device, buckets, support_k)  # fmt: skip
        if fit is not None and decisions.fits(fit):
            return decisions
        deferred = checked and self.validate and not host and inputs.device.type in decision_errors.DEFERRED_DEVICES
        host = checked and not deferred and (self.validate or inputs.device.type != "cuda")
        check_decisions(
            decisions,
            needed=self._needed,
            batch=inputs.batch,
            heads=inputs.heads,
            q_len=inputs.q_len,
            k_len=inputs.k_len,
            head_dim=inputs.head_dim,
            device=inputs.device,
            buckets=buckets,
            support_k=support_k,
            values=host,
            device_values=checked and not host and not deferred,
        )
        if fit is not None:
            decisions.fitted(fit)
        return self._check_on_device(decisions, inputs, poison) if deferred else decisions

    def _check_on_device(self, decisions: Decisions, inputs: AttentionInputs, poison: list) -> Decisions:
        """The decisions with their ids clamped, checked into the op's error record on the
        device, marked trusted; the call's poison (NaN when an id is out of range) goes to
        ``poison``."""
        checks = self.__dict__.get("_checks")
        if checks is None:  # what depends on the ids' layout alone, worked out once (BoundChecks)
            checks = self._checks = BoundChecks(self._error_record, self._ranges[0])
        checked, call_poison = checks(decisions, self.spec, head_dim=inputs.head_dim, device=inputs.device)
        if call_poison is not None:
            poison.append(call_poison)
        return checked

    def _error_record(self, device: torch.device, rows: tuple) -> DeviceErrors:
        """The op's device-side error record for these checks on ``device`` (made once)."""
        records = self.__dict__.setdefault("_errors", {})
        errors = records.get((device, rows))
        if errors is None:
            errors = records[(device, rows)] = DeviceErrors(repr(self), rows, device, id_check_for(device))
        return errors

    def _poll_errors(self, device: torch.device) -> None:
        """Raise an error an earlier call's device-side checks recorded, if its copy has
        reached the host (no wait)."""
        if not polling():
            return
        for errors in self.__dict__.get("_errors", {}).values():
            if errors.device == device:
                errors.poll()

    # -- running ----------------------------------------------------------------------------

    def plan(self, q: Tensor, k: Tensor, v: Tensor, *, decisions: Decisions | None = None) -> Plan:
        """The plan a call on these inputs uses (cached per dtype, device, sizes, grad, and
        whether the call makes its decisions or is given them)."""
        inputs = check_inputs(q, k, v, scale=self.scale)
        self._check_spec_fits(inputs)
        return self._plan(inputs, decides=decisions is None)

    def _plan(self, inputs: AttentionInputs, *, decides: bool) -> Plan:
        key = (
            inputs.dtype, inputs.device, inputs.heads, inputs.kv_heads, inputs.head_dim, inputs.requires_grad,
            _size_bucket(inputs.batch), _size_bucket(inputs.seqlen), _size_bucket(inputs.q_len),
            inputs.q_len == inputs.k_len, decides,
        )  # fmt: skip
        plan = self._plans.get(key)
        if plan is None:
            # an index builder may hash the lsh buckets itself only when the call makes them
            plan = make_plan(self.program, inputs, backend=self.backend, has_decide=bool(self.spec.decision_fields),
                             lsh_decide=decides and lsh_part(self.spec) is not None)  # fmt: skip
            self._plans[key] = plan
            self.stats.plans += 1
        else:
            self.stats.hits += 1
        return plan

    def _checked(self, q: Tensor, k: Tensor, v: Tensor, *, decides: bool) -> tuple[AttentionInputs, Plan]:
        """``check_inputs``, the spec's fit and the plan of a call. What they check and choose
        is a function of the call's signature (shapes, dtypes, devices, whether gradients are
        needed, whether it makes its decisions): a signature's third and later calls reuse the
        verdict and the plan."""
        grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        sig = (q.shape, k.shape, v.shape, q.dtype, k.dtype, v.dtype, q.device, k.device, v.device, grad, decides)
        hit = self._signatures.get(sig)
        if hit is not None:
            self.stats.hits += 1
            return AttentionInputs(q, k, v, hit[1]), hit[0]
        inputs = check_inputs(q, k, v, scale=self.scale)
        self._check_spec_fits(inputs)
        plan = self._plan(inputs, decides=decides)
        keep_from_second_call(self._signatures, sig, (plan, inputs.scale), _SIGNATURES)
        return inputs, plan

    @with_sdpa_keywords
    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        decisions: Decisions | None = None,
        generator: torch.Generator | None = None,
        cache: KVCache | None = None,
        **sdpa,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Attention of q (B, H, Tq, D) over k, v (B, Hkv, Tk, D) under the pattern, Tq <= Tk:
        query i sits at absolute position Tk - Tq + i (bottom-right, as FlashAttention).

        ``decisions`` overrides the criteria (deterministic); otherwise they run on q and k,
        drawing from ``generator`` where they are random (else the op's own, see ``seed``).
        With ``cache`` (:meth:`new_cache`), k and v are the n new tokens of q: they are
        appended, then q attends to every cached token (decisions, if given, are the new
        tokens' own: (B, H, n) each side). SDPA's keywords (``attn_mask`` as key padding,
        ``dropout_p=0``, ``is_causal``, ``scale``, ``enable_gqa``), ``key_padding_mask``/
        ``document_ids`` (exact predicates ANDed with the pattern; ``max_documents`` bounds the
        ids so that none is read back) and ``return_lse`` are described in
        :mod:`tilesparse.sdpa_call`, whose :func:`~tilesparse.sdpa_call.parse_sdpa_call` declares
        them (with their defaults: this method's signature shows them).
        """
        if sdpa:
            check_sdpa_keywords("CompiledAttention.__call__", sdpa)
        check_tensor_args(q, k, v)
        _check_generator(generator)
        call = parse_sdpa_call(q, k, causal=self.causal, **sdpa)
        if call.scale is not None and call.scale == (self.scale or q.shape[-1] ** -0.5):
            call = replace(call, scale=None)  # the op's own scale given again (as transformers does): a plain call
        if cache is not None:
            self._count_eager("cache=")
            if not call.plain:
                raise ValueError(
                    "cache= takes no scale, return_lse, attn_mask, key_padding_mask or document_ids: a cached "
                    "call attends with the op's own scale to every cached token"
                )
            return attend_cached(self, cache, q, k, v, decisions)
        if torch.is_autocast_enabled(q.device.type):
            dtype = torch.get_autocast_dtype(q.device.type)
            q, k, v = (t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in (q, k, v))
        if torch.compiler.is_compiling():
            if generator is not None and decisions is None:
                raise TypeError(_COMPILED_GENERATOR)
            if call.return_lse:
                raise ValueError("return_lse=True is not supported inside torch.compile; call the op outside it")
            return self._traced(q, k, v, decisions, call)
        with library.no_autocast(q.device):
            if self.cuda_graphs:
                reason = self._replay_refusal(q, decisions, call, generator)
                if reason is None:
                    self._poll_errors(q.device)
                    if decisions is None and generator is None:  # the one the eager call would draw from
                        generator = op_generator(self, q.device)
                    return self._graphed().run(q, k, v, decisions, None if decisions is not None else generator, call)
                self._count_eager(reason)
            if not call.plain:
                return run_sdpa_call(self, q, k, v, call, decisions, generator)
            return self._eager(q, k, v, decisions, generator)

    def _count_eager(self, reason: str) -> None:
        if self.cuda_graphs and not torch.compiler.is_compiling():
            self._graphed().stats.eager[reason] += 1

    def _eager(
        self, q: Tensor, k: Tensor, v: Tensor, decisions: Decisions | None, generator, *, keep_last: bool = True,
        poison: Tensor | None = None,
    ) -> Tensor:
        """The call outside dynamo (and inside the custom op): the plan's steps, executed.
        ``keep_last``: keep the index tensors for explain() (not inside the custom op, nor
        during a CUDA graph capture: a tensor kept from a graph's pool would outlive its
        replay, and torch.compile's CUDA graphs refuse untracked live allocations).
        ``poison``: the caller's (sdpa_call: document ids checked on the device), which the
        output takes with the call's own (decision_errors.poisoned)."""
        inputs, plan = self._checked(q, k, v, decides=decisions is None)
        self._poll_errors(inputs.device)
        # NaN where ids checked on the device are out of range: the caller's, then the decide
        # step's; the attend step may fold the first into the output (execute.Execution)
        poisons: list = [] if poison is None else [poison]
        ex = execute(plan, inputs, self._decide_step(inputs, decisions, generator, poisons), poison=poisons)
        if keep_last and not (inputs.device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
            self._last = tuple(g for g in ex.prepared if g is not None)
        out = ex.out
        for p in poisons[1 if ex.folded else 0 :]:
            out = poisoned(out, p)
        return out

    def _traced(self, q: Tensor, k: Tensor, v: Tensor, decisions: Decisions | None, call: SdpaCall) -> Tensor:
        """The call as custom ops, for dynamo: decisions (made by the decide op unless given),
        then the attention op with the call's SDPA-style arguments; the plan is found by
        ``self._key`` at run time."""
        names = library.decision_names(self.spec)
        if decisions is None:
            # an op with its own generator draws outside CUDA graphs (library.decide_seeded)
            decide = torch.ops.tilesparse.decide if self.seed is None else torch.ops.tilesparse.decide_seeded
            tensors = decide(q, k, self._key) if names else []
            trusted = not self._user_criteria  # a user criterion's ids: checked by the op
        else:
            tensors = [getattr(decisions, n) for n in names]
            trusted = False
        sdpa = (call.scale, call.key_padding_mask, call.document_ids, call.max_documents)
        return torch.ops.tilesparse.attention(q, k, v, tensors, self._key, trusted, *sdpa)

    def prepare(self, q: Tensor, k: Tensor, v: Tensor, *, decisions: Decisions | None = None, generator=None) -> Prepared:
        """The index tensors of every head group (for inspection: ``tilesparse.ir.to_string``)."""
        inputs = check_inputs(q, k, v, scale=self.scale)
        self._check_spec_fits(inputs)
        plan = self._plan(inputs, decides=decisions is None)
        with unpooled():  # the groups are the caller's: their buffers are not lent again
            ex = execute(plan, inputs, self._decide_step(inputs, decisions, generator), until="index")
        dec = ex.decisions
        groups = tuple(  # a group that reads no index tensors gets the IR's, for inspection
            g if g is not None else BUILDERS["torch"].build(plan.program, a.group, a.heads, with_dense_heads(dec, a.dense_heads), inputs)
            for a, g in zip(plan.assignments, ex.prepared, strict=True)
        )
        return Prepared(plan.program, groups, inputs.batch, inputs.heads, inputs.seqlen, inputs.q_len)

    def new_cache(
        self,
        batch: int,
        max_tokens: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        *,
        heads: int | None = None,
        kv_capacity: int | None = None,
        seed: int = 0,
    ) -> KVCache:
        """An empty :class:`tilesparse.KVCache` for this op: ``batch`` sequences of up to
        ``max_tokens`` tokens, ``heads`` query heads (default ``kv_heads``); ``kv_capacity``
        slots per kv head (default ``max_tokens``; fewer when QKDrop leaves keys unstored);
        ``seed`` draws the lsh rotations and the other criteria's randomness."""
        return KVCache(
            self.spec, causal=self.causal, batch=batch, max_tokens=max_tokens,
            heads=kv_heads if heads is None else heads, kv_heads=kv_heads, head_dim=head_dim, dtype=dtype,
            device=device, kv_capacity=kv_capacity, seed=seed,
        )  # fmt: skip

    # -- the semantics ------------------------------------------------------------------------

    def reference(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        decisions: Decisions | None = None,
        precision: torch.dtype = torch.float32,
        key_padding_mask: Tensor | None = None,
        document_ids: Tensor | None = None,
    ) -> Tensor:
        """Masked dense attention with the spec's own mask function: the definition of correct.

        Returns ``precision`` (float32 by default, float64 when asked), not the inputs' dtype,
        so a comparison sees the reference's rounding only. O(T^2) memory.
        """
        inputs = check_inputs(q, k, v, scale=self.scale)
        self._check_spec_fits(inputs)
        if decisions is None and self.spec.decision_fields:
            raise ValueError(
                f"reference needs decisions= for {self.spec}: it compares against given decisions "
                "(attn.decide(q, k) makes them)"
            )
        dec = self._decisions(inputs, decisions or Decisions(), None, host=True)
        mask = dense_mask(self.spec, dec, causal=self.causal, inputs=inputs)
        call = parse_sdpa_call(q, k, causal=self.causal, key_padding_mask=key_padding_mask, document_ids=document_ids)
        if call.document_ids is not None:
            document_range(call.document_ids)  # a negative id is an error
        extra = reference_mask_mod(call.key_padding_mask, call.document_ids, inputs.q_len)
        if extra is not None:  # key padding and documents AND with the pattern (sdpa_call's meaning)
            keep = _index_mask(extra, inputs)
            mask = keep if mask is None else mask & keep
        qf = kf = None
        sup = self.spec.supports(dec)
        if sup is not None:
            qf = feature_mask(sup[0], inputs.head_dim, precision)
            kf = feature_mask(sup[1], inputs.head_dim, precision)
            dense = self.spec.dense_heads_mask(inputs.heads)
            if dense is not None:
                qf[:, dense], kf[:, dense] = 1.0, 1.0
        return masked_attention(q, k, v, mask, scale=inputs.scale, q_features=qf, k_features=kf, precision=precision)

    # -- explaining ---------------------------------------------------------------------------

    def explain(self, q: Tensor, k: Tensor, v: Tensor, *, decisions: Decisions | None = None) -> str:
        """The plan for these inputs: stages, backend per group, estimated costs, fusions, input
        copies, refused backends and why; the visited-tile fraction estimated by the planner,
        observed on decisions drawn now (or given), and observed on the last call."""
        inputs = check_inputs(q, k, v, scale=self.scale)
        plan = self._plan(inputs, decides=decisions is None)
        lines = [f"{self}", f"inputs: q {tuple(q.shape)} k/v {tuple(k.shape)} {str(q.dtype).removeprefix('torch.')} on {q.device}"]
        lines.append(plan.describe())
        copies = sorted({c for a in plan.assignments for c in a.backend.input_copies(inputs)})
        lines.append("input copies: " + ("; ".join(copies) if copies else "none (every input is read in place)"))
        notes = list(dict.fromkeys(n for a in plan.assignments for n in a.backend.kernel_notes(inputs)))
        if notes:
            lines.append("kernels: " + "; ".join(notes))
        last = self._last
        prepared = self.prepare(q, k, v, decisions=decisions, generator=torch.Generator(q.device).manual_seed(0))
        for i, g in enumerate(prepared.groups):
            lines.append(f"group {i} tiles ({g.block_q}x{g.block_k}): " + _tile_line(g))
        for g in last:
            lines.append(f"last call, heads {list(g.heads)}: " + _tile_line(g))
        return "\n".join(lines)


# dynamo cannot trace a torch.Generator (torch.rand(..., generator=g) itself breaks the graph):
# a compiled call refuses one rather than draw from the global generator instead
_COMPILED_GENERATOR = (
    "generator= cannot be used inside torch.compile (dynamo does not trace torch.Generator, so "
    "the seed would be ignored); make the decisions outside the compiled region, "
    "dec = attn.decide(q, k, generator=g), and pass decisions=dec to the compiled call"
)


_SIGNATURES = 64  # call signatures an op remembers (sizes that change every call recheck every call)


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")


def _tile_line(g: PreparedGroup) -> str:
    s = tile_stats(g, exact=False)
    causal = " causal" if g.group.causal else ""
    return (
        f"visited {s['visited']} of {s['dense_tiles']} dense{causal} ({100 * s['visited_fraction']:.1f}%), "
        f"{s['unmasked']} without mask"
    )


def _size_bucket(n: int) -> int:
    """n rounded up to a power of two: plans are shared within a bucket."""
    return 1 << max(0, n - 1).bit_length()


def _index_mask(mod, inputs: AttentionInputs) -> Tensor:
    """(B, H, Tq, Tk) bool of a mask function over every (b, h, i, j), i the query row."""
    B, H, Tq, Tk, dev = inputs.batch, inputs.heads, inputs.q_len, inputs.k_len, inputs.device
    b, h, i, j = (torch.arange(n, device=dev) for n in (B, H, Tq, Tk))
    return mod(b.view(B, 1, 1, 1), h.view(1, H, 1, 1), i.view(1, 1, Tq, 1), j.view(1, 1, 1, Tk)).expand(B, H, Tq, Tk)


def _user_criteria(spec: SpecBase) -> bool:
    """Whether a part of ``spec`` decides with a registered (not built-in) criterion."""
    return any(hasattr(p, "criterion") and not get_criterion(p.criterion).builtin for p in spec.decision_parts())


def _buckets(spec: SpecBase) -> int | None:
    for p in spec.decision_parts():
        if hasattr(p, "buckets"):
            return p.buckets
    return None


def _support_k(spec: SpecBase) -> int | None:
    for p in spec.decision_parts():
        if isinstance(p, TopKFeatures):
            return p.k
    return None
