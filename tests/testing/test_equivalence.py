"""``assert_equivalent`` can fail: each planted wrong op (a scaled output, a wrong row, a NaN, a
missing or wrong gradient, a wrong dtype or shape, an error just over the dtype's tolerance)
is caught, and the message names the tensor, the max error, where, and the tolerance. Correct
ops pass, in every dtype, at the backends' ERROR_ATOL. CPU only.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.base import Backend
from tilesparse.testing import assert_equivalent, attention_inputs, decisions, tolerance

SPEC = ts.Hybrid(parts=[ts.Hash(buckets=2), ts.QKDrop(keep=0.8)])


class Planted:
    """``attn`` with its output passed through ``wrong(out, q, k, v)``; everything else delegated."""

    def __init__(self, wrong=None, spec=SPEC, backend="executor"):
        self.attn = ts.compile(spec, backend=backend)
        self.wrong = wrong or (lambda out, q, k, v: out)

    def __getattr__(self, name):
        return getattr(self.attn, name)

    def __call__(self, q, k, v, *, decisions):
        return self.wrong(self.attn(q, k, v, decisions=decisions), q, k, v)

    def __repr__(self):
        return f"{type(self).__name__}({self.wrong.__name__})"


def inputs(dtype=torch.float32, T=40, H=2, Hkv=1):
    g = torch.Generator().manual_seed(0)
    shapes = ((1, H, T, 16), (1, Hkv, T, 16), (1, Hkv, T, 16))
    return tuple(torch.randn(s, generator=g).to(dtype) for s in shapes)


def fails(op, *args, grads=True, **kw):
    """The AssertionError message ``assert_equivalent`` raises (the test fails if it passes)."""
    q, k, v = args or inputs()
    with pytest.raises(AssertionError) as info:
        assert_equivalent(op, q, k, v, grads=grads, **kw)
    return str(info.value)


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; backward multiplies the gradient by ``factor``."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.factor, None


def scaled_output(out, q, k, v):
    return out * 1.01


def swapped_rows(out, q, k, v):
    out = out.clone()
    out[:, :, [5, 6]] = out[:, :, [6, 5]]
    return out


def nan_element(out, q, k, v):
    out = out.clone()
    out[0, 1, 3, 2] = float("nan")
    return out


def no_grad_fn(out, q, k, v):
    return out.detach()


def as_float32(out, q, k, v):
    return out.float()


def one_row_short(out, q, k, v):
    return out[:, :, :-1]


def test_a_correct_op_passes_and_reports_its_errors():
    errors = assert_equivalent(ts.compile(SPEC, backend="executor"), *inputs())
    assert set(errors) == {"out", "grad q", "grad k", "grad v"}
    assert all(0 <= e < 1e-5 for e in errors.values()), errors


@settings(max_examples=30)
@given(data=st.data())
def test_correct_ops_pass_in_every_dtype(data):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 100)))
    dec = data.draw(decisions(SPEC, q.shape))
    assert_equivalent(ts.compile(SPEC, backend="executor"), q, k, v, decisions=dec)


def test_a_scaled_output_is_caught_with_where_and_the_tolerance():
    text = fails(Planted(scaled_output))
    assert "out: max |error|" in text and "worst at (0, " in text and "got " in text and "reference " in text
    assert "tolerance there" in text and "atol 0.0001 x scale" in text and "elements over" in text
    assert "Planted(scaled_output)" in text and "float32" in text


def test_a_wrong_row_is_caught_at_that_row():
    text = fails(Planted(swapped_rows))
    line = next(ln for ln in text.splitlines() if ln.startswith("out:"))
    where = eval(line.split(" at ")[1].split(":")[0])
    assert where[2] in (5, 6), line


def test_nan_is_caught_and_located():
    text = fails(Planted(nan_element))
    assert "out: 1 NaN/inf elements, first at (0, 1, 3, 2)" in text


def test_a_missing_gradient_is_caught():
    class CutK(Planted):
        def __call__(self, q, k, v, *, decisions):
            return self.attn(q, k.detach(), v, decisions=decisions)

    text = fails(CutK())
    assert "grad k: missing (None, no path from the output) but the reference's is nonzero" in text
    assert "grad q" not in text and "grad v" not in text


def test_an_output_without_grad_fn_is_caught():
    assert "out has no grad_fn" in fails(Planted(no_grad_fn))


def test_a_wrong_gradient_with_a_right_output_is_caught():
    class WrongDv(Planted):
        def __call__(self, q, k, v, *, decisions):
            return self.attn(q, k, _ScaleGrad.apply(v, 1.5), decisions=decisions)

    text = fails(WrongDv())
    assert "grad v: max |error|" in text and "out:" not in text
    assert_equivalent(WrongDv(), *inputs(), grads=False)  # only the output is compared


@pytest.mark.parametrize(
    "planted, says",
    [
        (as_float32, "out: dtype torch.float32, expected the inputs' torch.float16"),
        (one_row_short, "out: shape (1, 2, 39, 16), expected (1, 2, 40, 16)"),
    ],
)
def test_a_wrong_dtype_or_shape_is_caught(planted, says):
    assert says in fails(Planted(planted), *inputs(torch.float16))


@pytest.mark.parametrize(
    "dtype, passes, caught",
    [(torch.float32, 2e-5, 3e-4), (torch.float16, 1e-3, 1.5e-2), (torch.bfloat16, 1e-2, 8e-2)],
    ids=str,
)
def test_tolerances_follow_the_dtype(dtype, passes, caught):
    """An error of ``passes`` (relative to the largest output) is within the dtype's tolerance;
    ``caught`` is not."""
    q, k, v = inputs(dtype)

    def shifted(by):
        def shift(out, q, k, v):
            return (out.float() + by * out.detach().float().abs().max()).to(out.dtype)

        shift.__name__ = f"shift_{by}"
        return Planted(shift)

    assert_equivalent(shifted(passes), q, k, v, grads=False)
    assert "out: max |error|" in fails(shifted(caught), q, k, v, grads=False)


def test_tolerance_comes_from_the_planned_backends():
    q, k, v = inputs()
    for dtype, atol in Backend.ERROR_ATOL.items():
        assert tolerance(ts.compile(SPEC, backend="executor"), dtype, q, k, v) == atol
    assert tolerance(object(), torch.float16) == 4e-3
    with pytest.raises(ValueError, match="pass atol= explicitly"):
        tolerance(object(), torch.float64)


def test_explicit_tolerances_override_the_defaults():
    assert_equivalent(Planted(scaled_output), *inputs(), atol=0.05)
    assert_equivalent(Planted(scaled_output), *inputs(), atol=1e-4, rtol=0.02)
    text = fails(Planted(scaled_output), atol=1e-4, rtol=1e-3)
    assert "(atol 0.0001 x scale" in text and "+ rtol 0.001 x |ref|)" in text


def test_a_reference_with_nan_is_reported_not_passed():
    q, k, v = inputs()
    v = v.clone()
    v[0, 0, 0, 0] = float("inf")
    assert "the reference holds NaN/inf" in fails(ts.compile(SPEC), q, k, v, grads=False)


def test_decisions_default_to_the_specs_criteria_shared_by_both_sides():
    seen = []

    class Spy(Planted):
        def __call__(self, q, k, v, *, decisions):
            seen.append(decisions)
            return self.attn(q, k, v, decisions=decisions)

    assert_equivalent(Spy(), *inputs())
    assert seen[0] is not None and seen[0].present() == SPEC.decision_fields
