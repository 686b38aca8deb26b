"""Second derivatives: exact on the reference backend, a clear RuntimeError on the backends
whose backward pass is hand-written (executor, Triton; CuPy shares the guard), never a wrong
number. First-order gradients taken with ``create_graph=True`` stay exact. CPU, Triton
interpreted.
"""

import pytest
import torch

import tilesparse as ts


def _setup(T=40):
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, T, 16, generator=g) for _ in range(3))


@pytest.mark.parametrize("backend", ["executor", "triton"])
def test_kernel_backends_refuse_a_second_derivative_and_keep_the_first(backend):
    q, k, v = _setup()
    attn = ts.compile(ts.Hash(buckets=2), backend=backend)
    dec = attn.decide(q, k)
    Q = q.clone().requires_grad_()
    (g,) = torch.autograd.grad((attn(Q, k, v, decisions=dec) ** 2).sum(), Q, create_graph=True)
    (g_plain,) = torch.autograd.grad((attn(Q, k, v, decisions=dec) ** 2).sum(), Q)
    torch.testing.assert_close(g.detach(), g_plain)
    with pytest.raises(RuntimeError, match=rf"'{backend}' backend's backward pass is first order only"):
        torch.autograd.grad(g.pow(2).sum(), Q)


def test_reference_second_derivatives_match_dense_masked_attention():
    q, k, v = _setup()
    spec = ts.Hash(buckets=2)
    attn = ts.compile(spec, backend="reference")
    dec = attn.decide(q, k)
    mask = (dec.q_bucket[..., :, None] == dec.k_bucket[..., None, :]) & torch.ones(40, 40, dtype=torch.bool).tril()

    def second(fn):
        Q = q.clone().requires_grad_()
        (g,) = torch.autograd.grad((fn(Q).double() ** 2).sum(), Q, create_graph=True)
        (h,) = torch.autograd.grad(g.pow(2).sum(), Q)
        return h

    def dense(Q):  # every row keeps itself (same bucket, causal): no empty row
        s = (Q.double() @ k.double().transpose(-1, -2) / 4.0).masked_fill(~mask, float("-inf"))
        return torch.softmax(s, dim=-1) @ v.double()

    theirs = second(dense)
    ours = second(lambda Q: attn.reference(Q, k, v, decisions=dec, precision=torch.float64))
    torch.testing.assert_close(ours, theirs)
    via_call = second(lambda Q: attn(Q, k, v, decisions=dec))
    torch.testing.assert_close(via_call, theirs, rtol=1e-3, atol=1e-3)


def test_under_torch_compile_a_second_derivative_is_refused_too():
    q, k, v = _setup()
    attn = ts.compile(ts.Hash(buckets=2), backend="executor")
    dec = attn.decide(q, k)
    f = torch.compile(lambda Q: attn(Q, k, v, decisions=dec), backend="eager", fullgraph=True)
    Q = q.clone().requires_grad_()
    (g,) = torch.autograd.grad((f(Q) ** 2).sum(), Q, create_graph=True)
    (g_plain,) = torch.autograd.grad((attn(Q, k, v, decisions=dec) ** 2).sum(), Q)
    torch.testing.assert_close(g.detach(), g_plain)
    with pytest.raises(RuntimeError, match="under torch.compile the op's backward pass is first order only"):
        torch.autograd.grad(g.pow(2).sum(), Q)
