"""Which dQ kernel the Triton backend launches, on the CPU: the rule that picks the
warp-specialized Gluon kernel (op.ws_dq), the reasons explain() gives when it does not, the
backward handing the dQ launch to it with the Triton kernel's arguments and flags
(nonfinite.launch_pair's stand-in), and its own launch shape (gluon_dq.launch). The kernel itself
runs on Hopper only: tests/gpu/test_gluon_dq_gpu.py.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton import gluon_dq, op
from tilesparse.backends.triton.op import override_config, tile_config, ws_dq, ws_dq_reason

# this directory is on the path (no __init__.py)
from test_dkdv_choice import _group, _Recorder, check_reasons, check_segment_rule, record_sites


def test_explain_names_the_kernel_and_why_not_the_warp_specialized_one():
    q = torch.randn((1, 2, 40, 64))
    text = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton").explain(q, q, q)
    line = next(s for s in text.splitlines() if s.startswith("kernels: "))
    assert "triton dQ: the Triton kernel (the warp-specialized one does not run: Gluon kernels do not run " \
           "under TRITON_INTERPRET=1)" in line  # fmt: skip


def test_the_reasons_in_their_order(monkeypatch):
    q = torch.empty((1, 1, 1, 128), dtype=torch.bfloat16)
    cfg = tile_config(128, torch.bfloat16, torch.device("cuda"))
    assert "TRITON_INTERPRET=1" in ws_dq_reason(q, cfg)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert ws_dq_reason(q, cfg) == "not on a CUDA device"
    assert not ws_dq(cfg, q)
    assert ws_dq_reason(q, tile_config(128, torch.bfloat16, torch.device("cpu"))) == "not on a CUDA device"


def test_the_configurations_take_it_at_d128_only():
    """16-bit D=128 from 1,024-row bucket segments (run 123); D=64 measured slower, fp32 and the
    other head dims have no Gluon kernel."""
    for D in (32, 64, 96, 128, 256):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            want = 1024 if D == 128 and dtype != torch.float32 else 0
            assert tile_config(D, dtype, torch.device("cuda")).ws_dq == want, (D, dtype)
    assert tile_config(128, torch.bfloat16, torch.device("cpu")).ws_dq == 0
    assert gluon_dq.dq_config(128) == gluon_dq.DqConfig(64, 3, 216)
    assert gluon_dq.dq_config(32) is None and gluon_dq.dq_config(256) is None


def test_bucket_groups_take_it_from_a_segment_length(monkeypatch):
    q, dropped, rule = check_segment_rule(monkeypatch, "ws_dq")
    with override_config(ws_dq=0):
        assert not rule(tile_config(64, q.dtype, q.device), q, dropped)


def test_the_backward_hands_the_dq_launch_to_it(monkeypatch):
    """With the kernel taken, the dQ launch pair runs gluon_dq's site at the Triton kernel's grid
    on its runtime arguments, with the group's flags, then the sanitizing variant."""
    monkeypatch.setattr(op, "ws_dq", lambda cfg, q, g=None: True)
    monkeypatch.setattr(op, "ws_dkdv", lambda cfg, q, g=None: False)
    sites, pairs = record_sites(monkeypatch, gluon_dq), []

    def pair(kernel, launch, tensors, rest, scalars, sanitize=True):
        pairs.append((kernel, launch.grid, (tensors, rest, scalars), launch.unchanged, launch.constants))

    monkeypatch.setattr(op, "launch_pair", pair)
    q, g = _group(ts.Hash(buckets=4), T=120)
    q = q.requires_grad_()
    k, v = (torch.randn((1, 2, 120, 64), requires_grad=True) for _ in range(2))
    scale, cfg = 0.125, tile_config(64, q.dtype, q.device)
    o = op.sparse_attention(q, k, v, g, scale, cfg)  # the forward pair is recorded too: nothing runs
    o.backward(torch.ones_like(o))
    (dq_pair,) = [p for p in pairs if p[0] is op.kernels._attn_bwd_dq]
    kernel, grid, args, unchanged, kwargs = dq_pair
    assert unchanged is not None
    assert unchanged(*args) is None  # CPU tensors: nothing read for the next launch
    ((got_grid, kw, calls),) = sites
    tensors, rest, scalars = args  # the site takes all but the workspace, the last tensor (Gluon kernels do not split)
    assert got_grid == grid == (g.q_ranges.shape[2], 4) and calls == [(tensors[:-1], rest, scalars, None)]
    assert kw == dict(head_dim=64, max_seg=g.q_ranges.shape[3], flags=op._flags(g, cfg))
    (dkdv_pair,) = [p for p in pairs if p[0] is op.kernels._attn_bwd_dkdv]
    assert dkdv_pair[3] is None  # dK/dV stays on the Triton kernel here


@pytest.mark.parametrize("D", [64, 128])
def test_gluon_launch_takes_the_flags_and_its_launch_shape(monkeypatch, D):
    rec = _Recorder()
    monkeypatch.setattr(gluon_dq, "_launcher", lambda: rec)
    flags = dict(CAUSAL=True, STRICT=False, SAME_BUCKET=True, NOT_SELF=False, SINGLE_LOOP=True)
    gluon_dq.launch((5, 8), ("args",), head_dim=D, max_seg=4, flags=flags)
    cfg = gluon_dq.dq_config(D)
    ((grid, args, const, _),) = rec.launches
    assert grid == (5, 8) and args == ("args",)
    assert const == dict(HEAD_DIM=D, BLOCK_M=128, BLOCK_N=cfg.block_n, MAX_SEG=4, **flags, STAGES=cfg.stages,
                         COMPUTE_REGS=cfg.regs, num_warps=4, maxnreg=cfg.maxnreg)  # fmt: skip
    gluon_dq.site((5, 8), head_dim=D, max_seg=4, flags=flags)(("t",), (), (3,))
    assert rec.launches[1] == ((5, 8, 1), ("t", 3), const, None)  # its site launches as launch() does
    gluon_dq.launch((5, 8), ("args",), head_dim=D, max_seg=4, flags=flags, config=gluon_dq.DqConfig(128, 2, 216, 160))
    const = rec.launches[2][2]
    assert (const["BLOCK_N"], const["STAGES"], const["COMPUTE_REGS"], const["maxnreg"]) == (128, 2, 216, 160)


def test_where_it_cannot_run_the_reason_names_the_value(monkeypatch):
    check_reasons(monkeypatch, gluon_dq, block=(128, 64, "query blocks of 64 rows (the kernel takes 128)"),
                  head_dims=(64, 96, "64 and 128"))
