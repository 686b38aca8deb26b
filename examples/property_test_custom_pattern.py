"""Property tests of a custom pattern, as a user writes them: pytest, hypothesis and
``tilesparse.testing``.

The pattern: hash attention whose buckets come from our own criterion ("sign-bucket": a
token's bucket is the sign pattern of its first two features), AND QK-drop. For inputs and
decisions that hypothesis draws (the edge cases included: every query of a head dropped, rows
that keep no key, a query alone in its bucket), the tests check that the compiled op matches
the pattern's reference, output and gradients, and that a hand-written version of the pattern
does too. The last test plants an off-by-one in that hand-written version; it is marked as an
expected failure (strict: if the bug went unnoticed, the run would fail).

    pytest examples/property_test_custom_pattern.py                      # 4 passed, 1 xfailed
    pytest --runxfail -k planted examples/property_test_custom_pattern.py

The second command shows the failure as you would meet it: hypothesis shrinks the failing
example to a small one (one batch, one head, a few tokens, the smallest head dim) and prints
its draws, and assert_equivalent names each tensor that differs, the worst element and the
tolerance there.
Runs on CPU in seconds and unchanged on a GPU (backend "auto").
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.testing import assert_equivalent, attention_inputs, decisions, specs

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@ts.criterion("sign-bucket", produces="bucket")
def sign_bucket(q, k, /, *, buckets, generator=None):
    """Bucket of a token: the signs of its first log2(buckets) features, read as a binary number."""
    bits = buckets.bit_length() - 1  # buckets a power of two
    weights = 2 ** torch.arange(bits, device=q.device)

    def bucket(x):
        return ((x[..., :bits] > 0).long() * weights).sum(dim=-1).to(torch.int32)

    return bucket(q), bucket(k)


SPEC = ts.Hybrid(parts=[ts.Hash(buckets=4, criterion="sign-bucket"), ts.QKDrop(keep=0.5)])
INPUTS = attention_inputs(seqlen=st.integers(1, 96), device=DEVICE)  # B, H, Hkv, D, dtype drawn too
FEW = settings(max_examples=20, deadline=None)


@FEW
@given(inputs=INPUTS, causal=st.booleans())
def test_pattern_with_its_criterion_matches_reference(inputs, causal):
    # decisions=None: assert_equivalent draws them with attn.decide, i.e. our criterion
    assert_equivalent(ts.compile(SPEC, causal=causal), *inputs)


@FEW
@given(data=st.data())
def test_pattern_matches_reference_for_any_decisions(data):
    q, k, v = data.draw(INPUTS)
    dec = data.draw(decisions(SPEC, q.shape, device=DEVICE))
    assert_equivalent(ts.compile(SPEC), q, k, v, decisions=dec)


@FEW
@given(data=st.data())
def test_builtin_patterns_we_also_use_match_reference(data):
    q, k, v = data.draw(INPUTS)
    spec = data.draw(specs(kinds=["hash", "hybrid"], heads=q.shape[1], max_k=q.shape[-1]))
    dec = data.draw(decisions(spec, q.shape, device=DEVICE))
    assert_equivalent(ts.compile(spec), q, k, v, decisions=dec)


def hand_written(q, k, v, dec, *, diagonal=0):
    """Our own implementation of SPEC (causal): softmax attention in torch under the pattern's
    dense mask. ``diagonal=-1`` is the planted bug: keys j < i where SPEC keeps j <= i."""
    group = q.shape[1] // k.shape[1]  # grouped-query attention: one k, v head per query head
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    same_bucket = dec.q_bucket[..., :, None] == dec.k_bucket[..., None, :]
    both_kept = dec.q_keep[..., :, None] & dec.k_keep[..., None, :]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril(diagonal)
    mask = same_bucket & both_kept & causal
    # a row that keeps no key outputs zeros: its softmax would be 0/0. (F.scaled_dot_product_attention
    # leaves such rows to its kernel; some GPU kernels give garbage there, or NaN gradients: these
    # tests found that on a GPU)
    has_key = mask.any(dim=-1, keepdim=True)
    scores = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)
    return ((torch.softmax(scores, dim=-1) * has_key) @ v.float()).to(q.dtype)


class HandWritten:
    """``hand_written`` as an op for assert_equivalent: our forward, and the compiled op's spec,
    decide() and reference (the pattern's meaning)."""

    def __init__(self, diagonal=0):
        self.compiled = ts.compile(SPEC)
        self.diagonal = diagonal

    def __getattr__(self, name):
        return getattr(self.compiled, name)

    def __call__(self, q, k, v, *, decisions):
        return hand_written(q, k, v, decisions, diagonal=self.diagonal)

    def __repr__(self):
        return f"HandWritten(diagonal={self.diagonal}) of {SPEC}"


@FEW
@given(data=st.data())
def test_hand_written_version_matches_reference(data):
    q, k, v = data.draw(INPUTS)
    assert_equivalent(HandWritten(), q, k, v, decisions=data.draw(decisions(SPEC, q.shape, device=DEVICE)))


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="planted off-by-one: the diagonal is dropped")
@FEW
@given(data=st.data())
def test_planted_off_by_one_is_caught(data):
    q, k, v = data.draw(INPUTS)
    assert_equivalent(HandWritten(diagonal=-1), q, k, v, decisions=data.draw(decisions(SPEC, q.shape, device=DEVICE)))
