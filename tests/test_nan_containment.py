"""An inf or NaN in k or v at a key that no query attends reaches no output and no gradient
(a row's output depends only on the keys its mask keeps; a dropped query outputs zeros): on the
reference, the tile executor and the Triton kernels (keys some rows keep:
test_nan_containment_tiles.py; CuPy: tests/backends/cupy/test_emulated_nan_containment.py). CPU.
"""

import pytest
import torch

import tilesparse as ts


def _poisoned(spec, j):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 70, 16, generator=g) for _ in range(3))
    if isinstance(spec, ts.QKDrop):
        q_keep = torch.rand(1, 2, 70, generator=g) < 0.6
        k_keep = torch.rand(1, 2, 70, generator=g) < 0.6
        k_keep[:, :, j] = False
        dec = ts.Decisions(q_keep=q_keep, k_keep=k_keep)
    else:  # no query in bucket 3; key j alone there
        q_bucket = torch.randint(0, 3, (1, 2, 70), generator=g)
        k_bucket = torch.randint(0, 3, (1, 2, 70), generator=g)
        k_bucket[:, :, j] = 3
        dec = ts.Decisions(q_bucket=q_bucket, k_bucket=k_bucket)
    kp, vp = k.clone(), v.clone()
    vp[:, :, j] = float("inf")
    kp[:, :, j, 3] = float("nan")
    return (q, k, v), (q, kp, vp), dec


CASES = [(b, kind) for b in ("reference", "executor", "triton") for kind in ("drop", "hash")]
SPECS = {"drop": ts.QKDrop(keep=0.5), "hash": ts.Hash(buckets=4)}


@pytest.mark.parametrize(("backend", "kind"), CASES)
def test_a_poisoned_unattended_key_changes_nothing(backend, kind):
    spec = SPECS[kind]
    j = 20
    clean, poisoned, dec = _poisoned(spec, j)
    attn = ts.compile(spec, backend=backend)
    want = attn(*clean, decisions=dec)
    leaves = [t.clone().requires_grad_() for t in poisoned]
    out = attn(*leaves, decisions=dec)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-6)
    out.square().sum().backward()
    for name, t in zip("qkv", leaves, strict=True):
        assert torch.isfinite(t.grad).all(), f"d{name} is not finite"
    assert not leaves[1].grad[:, :, j].any() and not leaves[2].grad[:, :, j].any()
