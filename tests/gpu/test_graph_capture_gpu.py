"""The whole op in a CUDA graph, and no host synchronization in a call (H200).

For every built-in pattern (backend="auto": SDPA for dense groups, Triton for sparse ones):

- a warmed-up call, forward and backward, decisions given (checked on the device) and made,
  runs under ``torch.cuda.set_sync_debug_mode("error")``: nothing waits for the device;
- one ``torch.cuda.graph`` captures forward and backward with given decisions; replayed after
  new q, k, v, output gradient and new decisions are copied into its static tensors, it gives
  the eager result (output and the three gradients), twice in a row;
- a packed call (key padding, document ids with ``max_documents``) does not sync either;
- ``torch.cuda.make_graphed_callables`` over the op (the README's recipe for host-bound
  steps) replays the eager call with new q, k, v and decisions copied in, forward and backward;
- a bad bucket id still raises a clear ``ValueError``: at the op's next eager call, and, inside
  a replayed graph, from ``tilesparse.check_errors()``; the call that received it returns NaN;
- ``torch.compile(mode="reduce-overhead")`` (inductor with CUDA graph trees) runs a small
  training loop without recompiling, with the op's calls captured in the CUDA graphs, and a
  deterministic pattern's compiled output and gradients equal eager ones;
- ``torch.compile`` in its default mode equals eager for every pattern; its backward
  recomputes the forward (the op runs twice a step).

Run: ``TRITON_INTERPRET=0 python -m pytest -q -m gpu tests/gpu/test_graph_capture_gpu.py``.
"""

from __future__ import annotations

import gc
import math

import pytest
import torch

import tilesparse as ts
from tilesparse.testing import AttentionBlock

from builtin_specs import given_decisions, one_of_each_kind

DEVICE = torch.device("cuda")
B, H, T, D = 1, 4, 2048, 64
SPECS = one_of_each_kind(keep=0.5, buckets=8, k=16)


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    # an earlier test's graphs collected now, not inside a later capture: torch no longer
    # collects at a capture's start, and make_graphed_callables leaves reference cycles whose
    # collection mid-capture (freeing another graph's tensors) invalidated that capture
    gc.collect()


def _qkv(seed: int, dtype=torch.bfloat16):
    g = torch.Generator(DEVICE).manual_seed(seed)
    return tuple(torch.randn((B, H, T, D), generator=g, device=DEVICE, dtype=dtype) for _ in range(3))


def _eager(attn, q, k, v, dec, grad):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, decisions=dec)
    out.backward(grad)
    return out.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("given", [True, False], ids=["decisions_given", "decisions_made"])
@pytest.mark.parametrize("name", list(SPECS))
def test_a_warmed_up_call_does_not_sync(name, given):
    attn = ts.compile(SPECS[name])
    q, k, v = (t.requires_grad_() for t in _qkv(0))
    grad = torch.randn_like(q)
    for _ in range(2):  # plans, compiles kernels, caches head indices and the error record
        dec = given_decisions(attn, q, k) if given else None
        attn(q, k, v, decisions=dec).backward(grad)
    dec = given_decisions(attn, q, k) if given else None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        attn(q, k, v, decisions=dec).backward(grad)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    ts.check_errors()


@pytest.mark.parametrize("name", ["hash", "hybrid", "perhead"])
def test_packed_documents_with_max_documents_do_not_sync(name):
    attn = ts.compile(SPECS[name])
    q, k, v = (t.requires_grad_() for t in _qkv(0))
    docs = torch.repeat_interleave(torch.arange(4, device=DEVICE), T // 4)[None].expand(B, T).contiguous()
    pad = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
    pad[:, :17] = False
    kw = dict(key_padding_mask=pad, document_ids=docs, max_documents=4)
    dec = given_decisions(attn, q, k)
    want = attn.reference(q, k, v, decisions=dec, key_padding_mask=pad, document_ids=docs)
    for _ in range(2):
        out = attn(q, k, v, decisions=dec, **kw)
        out.float().square().sum().backward()
    torch.testing.assert_close(out.float(), want, atol=3e-2, rtol=3e-2)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        attn(q, k, v, decisions=dec, **kw).float().square().sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    ts.check_errors()


class _Captured:
    """One op's forward and backward captured in a CUDA graph around static tensors."""

    def __init__(self, attn, seed: int = 0):
        q, k, v = _qkv(seed)
        self.q, self.k, self.v = (t.clone().requires_grad_() for t in (q, k, v))
        self.dec = given_decisions(attn, q, k)
        self.grad = torch.randn_like(q)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the capture: plans, kernels, caches
            for _ in range(2):
                self._step(attn)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._step(attn)
        self.grads = [self.q.grad, self.k.grad, self.v.grad]

    def _step(self, attn):
        for t in (self.q, self.k, self.v):
            t.grad = None
        out = attn(self.q, self.k, self.v, decisions=self.dec)
        out.backward(self.grad)
        return out

    def replay(self, q, k, v, dec, grad):
        with torch.no_grad():
            for dst, src in zip((self.q, self.k, self.v, self.grad), (q, k, v, grad), strict=True):
                dst.copy_(src)
            if dec is not None:
                for name, t in dec.items():
                    if t is not None:
                        getattr(self.dec, name).copy_(t)
        self.graph.replay()
        torch.cuda.synchronize()
        return self.out, self.grads


@pytest.mark.parametrize("name", list(SPECS))
def test_a_captured_call_replays_the_eager_one_with_new_inputs_and_decisions(name):
    attn = ts.compile(SPECS[name])
    captured = _Captured(attn)
    for seed in (1, 2):
        q, k, v = _qkv(seed)
        dec = given_decisions(attn, q, k)
        grad = torch.randn_like(q)
        want, want_grads = _eager(attn, q, k, v, dec, grad)
        got, got_grads = captured.replay(q, k, v, dec, grad)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        for g, w in zip(got_grads, want_grads, strict=True):  # SDPA's backward may use atomics
            torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
    ts.check_errors()


@pytest.mark.parametrize("name", list(SPECS))
def test_make_graphed_callables_replays_the_eager_call(name):
    """The README's recipe for host-bound steps: torch.cuda.make_graphed_callables over the op
    with given decisions (copied into between steps), new q, k, v at every call."""
    attn = ts.compile(SPECS[name])
    q, k, v = (t.requires_grad_() for t in _qkv(0))
    dec = given_decisions(attn, q, k)
    graphed = torch.cuda.make_graphed_callables(lambda q_, k_, v_: attn(q_, k_, v_, decisions=dec), (q, k, v))
    for seed in (1, 2):
        q, k, v = _qkv(seed)
        new = given_decisions(attn, q, k)
        if dec is not None:
            for field, t in new.items():
                if t is not None:
                    getattr(dec, field).copy_(t)
        grad = torch.randn_like(q)
        want, want_grads = _eager(attn, q, k, v, new, grad)
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = graphed(*leaves)
        out.backward(grad)
        torch.testing.assert_close(out, want, rtol=0, atol=0)
        for g, w in zip((t.grad for t in leaves), want_grads, strict=True):  # SDPA's backward may use atomics
            torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)
    ts.check_errors()


def test_a_bad_bucket_id_raises_a_clear_error_eagerly():
    attn = ts.compile(ts.Hash(buckets=4))
    q, k, v = _qkv(0)
    dec = attn.decide(q, k)
    attn(q, k, v, decisions=dec)
    dec.k_bucket[0, 1, 7] = 1000  # an in-place edit ends the trust: the ids are checked
    out = attn(q, k, v, decisions=dec)  # clamped for the index build: no out-of-bounds read
    assert out.isnan().all()
    torch.cuda.synchronize()
    with pytest.raises(ValueError, match=r"decisions\.k_bucket values must lie in \[0, 4\), got \[0, 1000\]"):
        attn(q, k, v, decisions=dec)
    dec.k_bucket[0, 1, 7] = -5
    attn(q, k, v, decisions=dec)
    with pytest.raises(ValueError, match=r"decisions\.k_bucket values must lie in \[0, 4\), got \[-5, 3\]"):
        ts.check_errors()
    ts.check_errors()  # reported once


def test_a_bad_bucket_id_in_a_replayed_graph_raises_from_check_errors():
    attn = ts.compile(ts.Hash(buckets=8))
    captured = _Captured(attn)
    q, k, v = _qkv(3)
    dec = given_decisions(attn, q, k)
    dec.q_bucket[0, 2, 100] = 8
    out, grads = captured.replay(q, k, v, dec, torch.randn_like(q))
    assert out.isnan().all() and all(g.isnan().any() for g in grads)
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 8\), got \[0, 8\]"):
        ts.check_errors()
    dec.q_bucket[0, 2, 100] = 0
    out, _ = captured.replay(q, k, v, dec, torch.randn_like(q))
    assert not out.isnan().any()
    ts.check_errors()


def _capturing_calls(monkeypatch) -> list[bool]:
    """Record, per eager call of any op, whether a CUDA graph was being captured."""
    seen: list[bool] = []
    eager = ts.CompiledAttention._eager

    def recording(self, *a, **kw):
        seen.append(torch.cuda.is_current_stream_capturing())
        return eager(self, *a, **kw)

    monkeypatch.setattr(ts.CompiledAttention, "_eager", recording)
    return seen


def _train(attn, steps: int = 20) -> list[float]:
    """A small training loop under mode="reduce-overhead": the loss is computed inside the
    compiled function (its activations stay inside the CUDA graphs between forward and
    backward), one step marked per iteration; losses read back once, at the end."""
    torch.manual_seed(0)
    model = AttentionBlock(attn, heads=H, head_dim=D).to(DEVICE, torch.bfloat16)
    # Adam: steps of a fixed size whatever the gradients' scale, so the loss falls well past
    # the noise of patterns that draw new decisions every call
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    step = torch.compile(lambda x: model(x).float().square().mean(), mode="reduce-overhead", fullgraph=True)
    x = torch.randn(2, T, H * D, device=DEVICE, dtype=torch.bfloat16)

    def train_step():
        torch.compiler.cudagraph_mark_step_begin()
        loss = step(x)
        loss.backward()
        opt.step()
        # set_to_none: a gradient the backward graph produced becomes the parameter's .grad;
        # kept (zeroed) into the next step, the next replay would overwrite it under autograd
        opt.zero_grad(set_to_none=True)
        return loss.detach().clone()  # the graph's output buffer is reused by the next replay

    for _ in range(3):  # compile, warm up, record the CUDA graphs
        train_step()
    with torch._dynamo.config.patch(error_on_recompile=True):
        losses = torch.stack([train_step() for _ in range(steps)]).tolist()
    return losses


def _falls(losses: list[float]) -> bool:
    return sum(losses[-5:]) < sum(losses[:5])


def test_the_reduce_overhead_loop_trains_plain_sdpa():
    """The loop itself, with PyTorch's own attention in the op's place."""
    sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    losses = _train(sdpa)
    assert all(map(math.isfinite, losses)) and _falls(losses)


@pytest.mark.parametrize("name", ["dense", "qkdrop", "hash", "hybrid", "perhead"])
def test_reduce_overhead_trains_without_recompiling(name, monkeypatch):
    """The op in that loop, its calls captured in the CUDA graphs: its kept device tensors
    (head lists, error records) live outside the graphs' memory pool, which would otherwise
    refuse them or reuse their memory."""
    captured = _capturing_calls(monkeypatch)
    losses = _train(ts.compile(SPECS[name]))
    assert all(map(math.isfinite, losses)) and _falls(losses)
    assert any(captured), "no call of the op ran inside a CUDA graph capture (cudagraphs skipped?)"
    ts.check_errors()


@pytest.mark.parametrize("name", ["dense", "topk"])
def test_reduce_overhead_matches_eager(name):
    """Deterministic patterns (no random draw in the call): compiled and eager agree."""
    attn = ts.compile(SPECS[name])
    torch.manual_seed(0)
    model = AttentionBlock(attn, heads=H, head_dim=D).to(DEVICE, torch.float32)
    x = torch.randn(1, T, H * D, device=DEVICE)

    def run(m):
        out = m(x)
        grads = torch.autograd.grad(out.square().mean(), list(model.parameters()))
        return out.detach().clone(), [g.clone() for g in grads]

    want, want_grads = run(model)
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    for _ in range(3):
        torch.compiler.cudagraph_mark_step_begin()
        got, got_grads = run(compiled)
    torch.testing.assert_close(got, want, atol=2e-3, rtol=2e-3)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("name", list(SPECS))
def test_default_compile_matches_eager(name):
    """``torch.compile`` (default mode, inductor, no CUDA graphs): with given decisions every
    built-in pattern's compiled output and gradients equal eager ones, step after step; the
    backward op recomputes the forward (two calls a step)."""
    attn = ts.compile(SPECS[name])
    torch.manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    dec = attn.decide(q, k)
    go = torch.randn(B, H, T, D, device=DEVICE, dtype=torch.bfloat16)
    f = torch.compile(lambda q, k, v: attn(q, k, v, decisions=dec), fullgraph=True)
    want = attn(q, k, v, decisions=dec)
    want_grads = torch.autograd.grad(want, (q, k, v), go)
    for _ in range(2):
        calls = attn.stats.plans + attn.stats.hits
        got = f(q, k, v)
        got_grads = torch.autograd.grad(got, (q, k, v), go)
        assert attn.stats.plans + attn.stats.hits == calls + 2, "the forward and the backward's recomputation"
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
        for g, w in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, w, atol=2e-2, rtol=2e-2)
