"""TopKFeatures' q~ and k~ (the unkept features zeroed) in one launch for both sides, and their
gradients in one launch (:func:`keep_features`: a side a launch).

A feature group attends over q~ and k~: each token of each of the group's query heads keeps
the features its support lists and reads zeros elsewhere. As torch ops that is a 0/1 mask per
side (a zeroed tensor and a scatter), a tensor of ones for the heads outside the group (and
an ``index_copy_`` of the mask into it), k repeated per query head under grouped-query
attention, and a product: seven launches a side, four of them full-size writes. The product
also let an inf in an unkept feature through as NaN (0 * inf), where the reference keeps it out.

Here a program takes a tile of one output head's rows, reads the input rows of the head it
comes from (the kv head ``h // group`` for k~) and keeps each element whose feature the
row's support lists (``tl.where``: an inf or NaN in an unkept feature stays out, as in
the reference); heads outside the group (``slot`` -1) pass as they are. The gradient is the
same selection of the incoming gradient, summed over the query heads of each kv head for k
(fp32, in head order, one cast).

A call of the backend makes both sides through :class:`BoundFeatures`, made once per call
signature with the bound attend step: the sizes, the head slots, the launches' grids and
constants are worked out there, and one autograd node makes both sides and their gradients.
:func:`keep_features` checked and sized each side per call, an autograd node a side, and the
index build assembled the group each call: on a CPU with the launches stubbed (B=1, H=16, D=64,
T=4,096), TopKFeatures(8)'s forward took 118 us of host time and forward+backward 259, bound
74 and 186 (Hash(16): 51 and 127). :func:`unbound_features` restores that per-call path (A/B
timing on the GPU).

A bound call launches both sides at once (``_keep_features_pair``): the programs of the grid's
second axis below side 0's count write q~'s rows, the rest k~'s, each through the one kernel's
row tile (``_keep_rows``), and a row tile past its side's length exits (Tq < Tk). The gradients
likewise. A launch fewer a forward and a backward (about 17 us of host time each on a GPU's
host, docs/host-time.md), bit for bit the sides' own launches
(``tests/backends/triton/test_bound_features.py``); the sm_90 build holds 147 registers a
thread where a side's kernel holds 128 (D=64; 149 against 135 at D=128), neither spilling.
:func:`sides_apart` launches each side alone again (A/B timing).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ...ir.prepare import PreparedGroup, head_slots
from ..first_order import first_order_only
from ..switch import switched_on
from .launch import LeanKernel, Site, lean

__all__ = ["BoundFeatures", "constexprs", "keep_features", "sides_apart", "unbound_features", "unbound_features_on"]

# elements a program holds (rows x padded head dim): 64 rows at D=64, 32 at D=128; 12-27% less
# GPU time than half as many rows at both (run 188, benchmarks/results/ab_keep_features_run188_h200.json);
# D=256, not measured, keeps 8 rows
_TILE = 4096
_WARPS = 4
_UNBOUND = [False]  # unbound_features() in force
_APART = [False]  # sides_apart() in force


@triton.jit
def _keep_rows(SRC, SUPPORT, SLOT, DST, stride_xb, stride_xh, stride_xt, stride_sb, stride_sh, stride_st,
               seqlen, n_src, x_div, n_keep, heads_out, pid_t, pid_bo,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, WORDS: tl.constexpr):
    """Row tile ``pid_t`` of output head ``pid_bo`` (b x heads_out + o) of :func:`_keep_features`
    (its docstring says what is written)."""
    b = pid_bo // heads_out
    o = pid_bo % heads_out
    rows = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    feats = tl.arange(0, BLOCK_D)
    row_ok = rows < seqlen
    ok = row_ok[:, None] & (feats < HEAD_DIM)[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
    for r in range(0, n_src):
        h = o * n_src + r
        src = SRC + b.to(tl.int64) * stride_xb + (h // x_div).to(tl.int64) * stride_xh
        x = tl.load(src + rows[:, None].to(tl.int64) * stride_xt + feats[None, :], mask=ok, other=0.0).to(tl.float32)
        slot = tl.load(SLOT + h)
        if slot >= 0:  # the row's kept features as bits (64 a word), then each element's bit
            ids = SUPPORT + b.to(tl.int64) * stride_sb + slot.to(tl.int64) * stride_sh + rows.to(tl.int64) * stride_st
            w0 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            w1 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            w2 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            w3 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            for j in range(0, n_keep):
                fid = tl.load(ids + j, mask=row_ok, other=-1)
                bit = tl.where(fid >= 0, tl.full((BLOCK_T,), 1, tl.int64) << (fid & 63).to(tl.int64), 0)
                word = fid >> 6
                w0 |= tl.where(word == 0, bit, 0)
                if WORDS > 1:
                    w1 |= tl.where(word == 1, bit, 0)
                if WORDS > 2:
                    w2 |= tl.where(word == 2, bit, 0)
                    w3 |= tl.where(word == 3, bit, 0)
            word_of = (feats >> 6)[None, :]
            bits = w0[:, None] + tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.int64)
            if WORDS > 1:
                bits = tl.where(word_of == 1, w1[:, None], bits)
            if WORDS > 2:
                bits = tl.where(word_of == 2, w2[:, None], bits)
                bits = tl.where(word_of == 3, w3[:, None], bits)
            keep = ((bits >> (feats & 63).to(tl.int64)[None, :]) & 1) != 0
            x = tl.where(keep, x, 0.0)
        acc += x
    out = DST + pid_bo.to(tl.int64) * seqlen * HEAD_DIM
    tl.store(out + rows[:, None].to(tl.int64) * HEAD_DIM + feats[None, :], acc.to(DST.dtype.element_ty), mask=ok)


@triton.jit(do_not_specialize=["seqlen", "n_src", "x_div", "n_keep", "heads_out"])
def _keep_features(SRC, SUPPORT, SLOT, DST,
                   stride_xb, stride_xh, stride_xt, stride_sb, stride_sh, stride_st,
                   seqlen, n_src, x_div, n_keep, heads_out,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, WORDS: tl.constexpr):
    """DST[b, o, t] (contiguous (B, heads_out, seqlen, HEAD_DIM)) = the sum over r < n_src of SRC[b,
    h // x_div, t] with h = o * n_src + r, each element kept where SUPPORT[b, SLOT[h], t, :n_keep]
    lists its feature (every element where SLOT[h] < 0); in fp32, cast to DST's dtype."""
    _keep_rows(SRC, SUPPORT, SLOT, DST, stride_xb, stride_xh, stride_xt, stride_sb, stride_sh, stride_st,
               seqlen, n_src, x_div, n_keep, heads_out, tl.program_id(0), tl.program_id(1),
               HEAD_DIM, BLOCK_D, BLOCK_T, WORDS)  # fmt: skip


@triton.jit(do_not_specialize=["seqlen0", "n_src0", "x_div0", "n_keep0", "heads_out0",
                               "seqlen1", "n_src1", "x_div1", "n_keep1", "heads_out1", "programs0"])  # fmt: skip
def _keep_features_pair(SRC0, SUPPORT0, SLOT0, DST0, SRC1, SUPPORT1, SLOT1, DST1,
                        stride_xb0, stride_xh0, stride_xt0, stride_sb0, stride_sh0, stride_st0,
                        seqlen0, n_src0, x_div0, n_keep0, heads_out0,
                        stride_xb1, stride_xh1, stride_xt1, stride_sb1, stride_sh1, stride_st1,
                        seqlen1, n_src1, x_div1, n_keep1, heads_out1, programs0,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, WORDS: tl.constexpr):
    """:func:`_keep_features` of two sides in one launch: the programs of axis 1 below
    ``programs0`` (B x heads_out0) write side 0's rows, the rest side 1's; a row tile past its
    side's ``seqlen`` (the sides' lengths may differ: the grid covers the longer) exits."""
    pid_t = tl.program_id(0)
    pid = tl.program_id(1)
    if pid < programs0:
        if pid_t * BLOCK_T < seqlen0:
            _keep_rows(SRC0, SUPPORT0, SLOT0, DST0, stride_xb0, stride_xh0, stride_xt0, stride_sb0, stride_sh0,
                       stride_st0, seqlen0, n_src0, x_div0, n_keep0, heads_out0, pid_t, pid,
                       HEAD_DIM, BLOCK_D, BLOCK_T, WORDS)  # fmt: skip
    elif pid_t * BLOCK_T < seqlen1:
        _keep_rows(SRC1, SUPPORT1, SLOT1, DST1, stride_xb1, stride_xh1, stride_xt1, stride_sb1, stride_sh1,
                   stride_st1, seqlen1, n_src1, x_div1, n_keep1, heads_out1, pid_t, pid - programs0,
                   HEAD_DIM, BLOCK_D, BLOCK_T, WORDS)  # fmt: skip


def constexprs(head_dim: int, seqlen: int | None = None) -> dict:
    """The kernel's compile-time constants at ``head_dim`` for ``seqlen`` rows (None: many)."""
    block_d = triton.next_power_of_2(head_dim)
    block_t = max(1, (_TILE if block_d <= 128 else _TILE // 2) // block_d)
    if seqlen is not None:
        block_t = min(block_t, triton.next_power_of_2(seqlen))
    return dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_T=block_t, WORDS=triton.cdiv(block_d, 64))


def _launch(x: Tensor, support: Tensor, slots: Tensor, heads_out: int, n_src: int, x_div: int, dtype) -> Tensor:
    B, _, T, D = x.shape
    out = torch.empty((B, heads_out, T, D), dtype=dtype, device=x.device)
    if B * heads_out * T == 0:
        return out
    const = constexprs(D, T)
    _launch_into(lean(_keep_features), (triton.cdiv(T, const["BLOCK_T"]), B * heads_out), (T, n_src, x_div, heads_out),
                 dict(const, num_warps=_WARPS), x, support, slots, out)  # fmt: skip
    return out


def _launch_into(kernel: LeanKernel, grid: tuple[int, int], sizes: tuple[int, int, int, int], constants: dict,
                 x: Tensor, support: Tensor, slots: Tensor, out: Tensor) -> None:  # fmt: skip
    """One launch of the kernel into ``out``; ``sizes``: (seqlen, n_src, x_div, heads_out)."""
    tensors, scalars = _arguments(sizes, x, support, slots, out)
    kernel.launch(grid, (*tensors, *scalars), constants)


def _arguments(sizes: tuple[int, int, int, int], x: Tensor, support: Tensor, slots: Tensor, out: Tensor) -> tuple:
    """The kernel's runtime arguments into ``out``: its tensors, then its scalars."""
    seqlen, n_src, x_div, heads_out = sizes
    return (x, support, slots, out), (x.stride(0), x.stride(1), x.stride(2), *support.stride()[:3],
                                      seqlen, n_src, x_div, support.shape[-1], heads_out)  # fmt: skip


def keep_features(x: Tensor, support: Tensor, heads: tuple[int, ...], n_heads: int) -> Tensor:
    """x (B, Hx, T, D) with unit stride along D, as (B, n_heads, T, D): query head h reads x's
    head ``h // (n_heads // Hx)``; for the group's query heads ``heads`` (distinct, any order)
    the features outside their row of ``support`` ((B, len(heads), T, k) int32 feature ids, in
    ``heads``' order) are zeroed, the other heads pass as they are. Differentiable w.r.t. x
    (first order): the gradient keeps the same features and sums each kv head's query heads."""
    B, _, T, _ = x.shape
    _check_sizes(x, heads, n_heads, unit_stride=True)
    support = _checked_support(support, (B, len(heads), T))
    slots = head_slots(heads, n_heads, x.device)  # a cached device constant: no upload per call
    return _KeptFeatures.apply(x, support, slots, n_heads)


def _check_sizes(x: Tensor, heads: tuple[int, ...], n_heads: int, *, unit_stride: bool) -> None:
    """x's head count divides ``n_heads`` (and its stride along D is 1, with ``unit_stride``);
    ``heads`` are distinct query heads."""
    Hx = x.shape[1]
    if (unit_stride and x.stride(-1) != 1) or Hx == 0 or n_heads % Hx:
        raise ValueError(f"x {tuple(x.shape)} (stride {x.stride()}) does not fit {n_heads} query heads: "
                         "x needs unit stride along D and a head count dividing them")  # fmt: skip
    if len(set(heads)) != len(heads) or not all(0 <= h < n_heads for h in heads):
        raise ValueError(f"heads must be distinct query heads in [0, {n_heads}), got {heads}")


def _checked_support(support: Tensor, rows: tuple[int, int, int]) -> Tensor:
    """``support`` as the kernel reads it: (*rows, k) int32 with unit stride along k."""
    if support.dim() != 4 or support.shape[:3] != rows or support.dtype != torch.int32:
        B, Hg, T = rows
        raise ValueError(f"support must be ({B}, {Hg}, {T}, k) int32 feature ids (one row of heads a "
                         f"head), got {tuple(support.shape)} {support.dtype}")  # fmt: skip
    return _unit_last(support)


def _unit_last(x: Tensor) -> Tensor:
    """``x`` with unit stride along its last dim (the kernel's rows), copied only where it has none."""
    return x if x.stride(-1) == 1 else x.contiguous()


class _KeptFeatures(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, support: Tensor, slots: Tensor, n_heads: int) -> Tensor:
        ctx.save_for_backward(support, slots)
        ctx.group, ctx.dtype = n_heads // x.shape[1], x.dtype
        return _launch(x, support, slots, n_heads, 1, ctx.group, x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        support, slots = ctx.saved_tensors
        grad = _unit_last(grad)
        H = grad.shape[1]
        dx = _launch(grad, support, slots, H // ctx.group, ctx.group, 1, ctx.dtype)
        (dx,) = first_order_only("triton", (dx,), (grad,))
        return dx, None, None, None


def unbound_features():
    """Calls inside the block make q~ and k~ per call as before :class:`BoundFeatures`
    (:func:`keep_features` a side, each checked, sized and an autograd node of its own; the
    TopKFeatures group assembled in each index build): A/B timing within one process."""
    return switched_on(_UNBOUND)


def sides_apart():
    """Bound calls inside the block launch each side's q~ (k~) and each side's gradient alone,
    two launches a direction, as before ``_keep_features_pair``: A/B timing within one process
    (``call_times.py --ab paired-features``) and tests."""
    return switched_on(_APART)


def unbound_features_on() -> bool:
    """Whether :func:`unbound_features` is in force (the index build reads it per call)."""
    return _UNBOUND[0]


class BoundFeatures:
    """:func:`keep_features` of both sides for the calls of one head group at one signature (q
    (B, H, Tq, D), k (B, Hkv, Tk, D)): the heads and sizes are checked, the slots, grids and
    constants made, once; a call checks its supports' shapes, allocates q~ and k~ and
    launches, under one autograd node for both sides (none when no gradient is taken)."""

    __slots__ = ("heads", "n_heads", "q", "k", "keep_pair", "grad_pair")

    def __init__(self, heads: tuple[int, ...], q: Tensor, k: Tensor):
        n_heads = q.shape[1]
        _check_sizes(q, heads, n_heads, unit_stride=False)  # a call's q and k: made unit-stride first
        _check_sizes(k, heads, n_heads, unit_stride=False)
        slots = head_slots(heads, n_heads, q.device)
        self.heads, self.n_heads = tuple(heads), n_heads
        self.q, self.k = (_BoundSide(x, slots, len(heads), n_heads) for x in (q, k))
        B, D = q.shape[0], q.shape[-1]
        self.keep_pair = _pair_site(self.q.keeps, self.k.keeps, B, D)  # both sides a launch: forward
        self.grad_pair = _pair_site(self.q.grads, self.k.grads, B, D)  # and backward

    def __call__(self, q: Tensor, k: Tensor, g: PreparedGroup) -> tuple[Tensor, Tensor]:
        """q~ and k~ (B, H, T, D) of group ``g`` (the bound heads) from q and k (the bound
        sizes, unit stride along D)."""
        if g.heads != self.heads:
            raise ValueError(f"bound to query heads {self.heads}, given a group of heads {g.heads}")
        return self.pair(q, k, g.q_support, g.k_support)

    def pair(self, q: Tensor, k: Tensor, q_support: Tensor, k_support: Tensor) -> tuple[Tensor, Tensor]:
        """q~ and k~ of the bound heads from q and k (the bound sizes, unit stride along D) and
        their supports ((B, len(heads), T, k) feature ids, in the heads' order)."""
        if _UNBOUND[0]:
            H = self.n_heads
            return keep_features(q, q_support, self.heads, H), keep_features(k, k_support, self.heads, H)
        q_support = _checked_support(q_support, self.q.rows)
        k_support = _checked_support(k_support, self.k.rows)
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
            return _KeptPair.apply(q, k, q_support, k_support, self)
        return self.keep(q, k, q_support, k_support)

    def keep(self, q: Tensor, k: Tensor, q_support: Tensor, k_support: Tensor) -> tuple[Tensor, Tensor]:
        """q~ and k~ in one launch (each side its own where either side has no rows)."""
        if self.keep_pair is None or _APART[0]:
            return self.q.keep(q, q_support), self.k.keep(k, k_support)
        q_out, k_out = self.q.new(), self.k.new()
        _launch_pair(self.keep_pair, self.q.slots, (q, q_support, q_out), (k, k_support, k_out))
        return q_out, k_out

    def grads(self, dq_kept: Tensor, dk_kept: Tensor, q_support: Tensor, k_support: Tensor) -> tuple[Tensor, Tensor]:
        """The gradients w.r.t. q and k of q~ and k~ in one launch (as :meth:`keep`)."""
        if self.grad_pair is None or _APART[0]:
            return self.q.grad(dq_kept, q_support), self.k.grad(dk_kept, k_support)
        dq_kept, dk_kept = _unit_last(dq_kept), _unit_last(dk_kept)
        dq, dk = self.q.new_grad(), self.k.new_grad()
        _launch_pair(self.grad_pair, self.q.slots, (dq_kept, q_support, dq), (dk_kept, k_support, dk))
        return dq, dk


def _pair_site(side0: tuple | None, side1: tuple | None, batch: int, head_dim: int) -> tuple | None:
    """One launch of :func:`_keep_features_pair` for two sides' directions (each a
    ``_BoundSide`` direction: its site and sizes), None where either is empty: the row tiles
    are sized for the longer side; (site, side 0's sizes, side 1's, side 0's programs)."""
    if side0 is None or side1 is None:
        return None
    (_, sizes0), (_, sizes1) = side0, side1
    rows = max(sizes0[0], sizes1[0])
    constants = dict(constexprs(head_dim, rows), num_warps=_WARPS)
    programs0 = batch * sizes0[3]  # sizes: (seqlen, n_src, x_div, heads_out)
    grid = (triton.cdiv(rows, constants["BLOCK_T"]), programs0 + batch * sizes1[3])
    return Site(lean(_keep_features_pair), grid, constants), sizes0, sizes1, programs0


def _launch_pair(pair: tuple, slots: Tensor, side0: tuple, side1: tuple) -> None:
    """``pair`` (:func:`_pair_site`) launched on each side's (input, support, output)."""
    site, sizes0, sizes1, programs0 = pair
    tensors0, scalars0 = _arguments(sizes0, side0[0], side0[1], slots, side0[2])
    tensors1, scalars1 = _arguments(sizes1, side1[0], side1[1], slots, side1[2])
    site((*tensors0, *tensors1), (), (*scalars0, *scalars1, programs0))


class _BoundSide:
    """One side's launches at one signature: x (B, Hx, T, D) to (B, H, T, D), and back."""

    __slots__ = ("rows", "shape", "grad_shape", "dtype", "device", "slots", "keeps", "grads")

    def __init__(self, x: Tensor, slots: Tensor, n_group: int, n_heads: int):
        B, Hx, T, D = x.shape
        group = n_heads // Hx
        self.rows = (B, n_group, T)
        self.shape, self.grad_shape = (B, n_heads, T, D), (B, Hx, T, D)
        self.dtype, self.device, self.slots = x.dtype, x.device, slots
        constants = dict(constexprs(D, T), num_warps=_WARPS) if T else {}
        blocks = triton.cdiv(T, constants["BLOCK_T"]) if T else 0
        kernel = lean(_keep_features)
        # each direction's (site, (seqlen, n_src, x_div, heads_out)), None where its output is empty
        keeps = Site(kernel, (blocks, B * n_heads), constants), (T, 1, group, n_heads)
        self.keeps = keeps if B * n_heads * T else None
        self.grads = (Site(kernel, (blocks, B * Hx), constants), (T, group, 1, Hx)) if B * Hx * T else None

    def new(self) -> Tensor:
        """An output of the keeping direction, unfilled."""
        return torch.empty(self.shape, dtype=self.dtype, device=self.device)

    def new_grad(self) -> Tensor:
        """An output of the gradient's direction, unfilled."""
        return torch.empty(self.grad_shape, dtype=self.dtype, device=self.device)

    def keep(self, x: Tensor, support: Tensor) -> Tensor:
        return self._into(self.keeps, x, support, self.new())

    def grad(self, grad: Tensor, support: Tensor) -> Tensor:
        return self._into(self.grads, _unit_last(grad), support, self.new_grad())

    def _into(self, direction: tuple | None, x: Tensor, support: Tensor, out: Tensor) -> Tensor:
        """``out`` written by ``direction``'s launch (None: empty, nothing to launch)."""
        if direction is not None:
            site, sizes = direction
            tensors, scalars = _arguments(sizes, x, support, self.slots, out)
            site(tensors, (), scalars)
        return out


class _KeptPair(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, q_support: Tensor, k_support: Tensor, bound: BoundFeatures):
        ctx.save_for_backward(q_support, k_support)
        ctx.bound = bound
        return bound.keep(q, k, q_support, k_support)

    @staticmethod
    def backward(ctx, dq_kept: Tensor, dk_kept: Tensor):
        q_support, k_support = ctx.saved_tensors
        bound = ctx.bound
        if ctx.needs_input_grad[0] and ctx.needs_input_grad[1]:
            dq, dk = bound.grads(dq_kept, dk_kept, q_support, k_support)
        else:
            dq = bound.q.grad(dq_kept, q_support) if ctx.needs_input_grad[0] else None
            dk = bound.k.grad(dk_kept, k_support) if ctx.needs_input_grad[1] else None
        dq, dk = first_order_only("triton", (dq, dk), (dq_kept, dk_kept))
        return dq, dk, None, None, None
