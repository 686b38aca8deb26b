"""Which forward kernel the Triton backend launches, on the CPU: the rule that picks the
warp-specialized Gluon kernel (op.ws_fwd), the reasons explain() gives when it does not, the
forward handing its launch to it with the Triton kernel's arguments and flags
(nonfinite.launch_pair's stand-in), and its own launch shape (gluon_fwd.launch, gluon_fwd.site). The kernel itself
runs on Hopper only: tests/gpu/test_gluon_fwd_gpu.py.
"""

from __future__ import annotations

import torch

import tilesparse as ts
from tilesparse.backends.triton import gluon_fwd, op
from tilesparse.backends.triton.op import override_config, tile_config, ws_fwd, ws_fwd_reason

# this directory is on the path (no __init__.py)
from test_dkdv_choice import _group, _Recorder, check_reasons, check_segment_rule, record_sites


def test_explain_names_the_kernel_and_why_not_the_warp_specialized_one():
    q = torch.randn((1, 2, 40, 64))
    text = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton").explain(q, q, q)
    line = next(s for s in text.splitlines() if s.startswith("kernels: "))
    assert "triton forward: the Triton kernel (the warp-specialized one does not run: Gluon kernels do not run " \
           "under TRITON_INTERPRET=1)" in line  # fmt: skip


def test_the_reasons_in_their_order(monkeypatch):
    q = torch.empty((1, 1, 1, 128), dtype=torch.bfloat16)
    cfg = tile_config(128, torch.bfloat16, torch.device("cuda"))
    assert "TRITON_INTERPRET=1" in ws_fwd_reason(q, cfg)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert ws_fwd_reason(q, cfg) == "not on a CUDA device"
    assert not ws_fwd(cfg, q)
    assert ws_fwd_reason(q, tile_config(128, torch.bfloat16, torch.device("cpu"))) == "not on a CUDA device"


def test_the_configurations_take_it_at_d128_only():
    """16-bit D=128, bucket groups from 2,048-row segments (run 130-131); D=64 has no launch shape."""
    for D in (32, 64, 96, 128, 256):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            want = 2048 if D == 128 and dtype != torch.float32 else 0
            assert tile_config(D, dtype, torch.device("cuda")).ws_fwd == want, (D, dtype)
    assert tile_config(128, torch.bfloat16, torch.device("cpu")).ws_fwd == 0
    assert gluon_fwd.fwd_config(128) == gluon_fwd.FwdConfig(128, 2, 224)
    assert gluon_fwd.fwd_config(64) is None and gluon_fwd.fwd_config(256) is None


def test_bucket_groups_take_it_from_a_segment_length(monkeypatch):
    q, dropped, rule = check_segment_rule(monkeypatch, "ws_fwd")
    with override_config(ws_fwd=0):
        assert not rule(tile_config(64, q.dtype, q.device), q, dropped)


def test_the_forward_hands_its_launch_to_it(monkeypatch):
    """With the kernel taken, the forward launch pair runs gluon_fwd's site at the Triton kernel's
    grid on its runtime arguments (but the poison, None for the Triton kernel's sanitizing variant
    then), with the group's flags, then the sanitizing variant."""
    monkeypatch.setattr(op, "ws_fwd", lambda cfg, q, g=None: True)
    sites, pairs = record_sites(monkeypatch, gluon_fwd), []

    def pair(kernel, launch, tensors, rest, scalars, sanitize=True):
        pairs.append((kernel, launch.grid, (tensors, rest, scalars), launch.unchanged, launch.constants))

    monkeypatch.setattr(op, "launch_pair", pair)
    q, g = _group(ts.Hash(buckets=4), T=120)
    k, v = (torch.randn((1, 2, 120, 64)) for _ in range(2))
    cfg = tile_config(64, q.dtype, q.device)
    op.sparse_attention(q, k, v, g, 0.125, cfg)  # the pair is recorded: nothing runs
    ((kernel, grid, (tensors, rest, scalars), unchanged, kwargs),) = pairs
    assert kernel is op.kernels._attn_fwd and unchanged is not None
    assert "SANITIZE" not in kwargs  # launch_pair adds it to the second launch
    assert unchanged(tensors, rest, scalars) is None  # CPU tensors: nothing read for the next launch
    reading = (("dtypes",) * 6, tuple(range(6)))  # a pair's reading of the six tensors, passed on
    assert unchanged(tensors, rest, scalars, reading) is reading
    ((got_grid, kw, calls),) = sites
    # kernels._attn_fwd's runtime arguments through v_group but the workspace, the last tensor (the
    # Gluon forward does not split), and the poison, the last scalar, which is the op's to apply
    assert got_grid == grid == (g.q_ranges.shape[2], 4)
    assert calls == [(tensors[:-1], rest, scalars[:-1], None),
                     (tensors[:-1], rest, scalars[:-1], (reading[0][:-1], reading[1][:-1]))]
    assert scalars[-1] is None and len(tensors) + len(rest) + len(scalars) - 2 == 34 and tensors[0] is q
    assert kw == dict(head_dim=64, max_seg=g.q_ranges.shape[3], flags=op._flags(g, cfg))


def test_gluon_launch_takes_the_flags_and_its_launch_shape(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(gluon_fwd, "_launcher", lambda: rec)
    flags = dict(CAUSAL=True, STRICT=False, SAME_BUCKET=True, NOT_SELF=False, SINGLE_LOOP=True)
    gluon_fwd.launch((5, 8), ("args",), head_dim=128, max_seg=4, flags=flags)
    cfg = gluon_fwd.fwd_config(128)
    ((grid, args, const, _),) = rec.launches
    assert grid == (5, 8) and args == ("args",)
    assert const == dict(HEAD_DIM=128, BLOCK_M=128, BLOCK_N=cfg.block_n, MAX_SEG=4, **flags, STAGES=cfg.stages,
                         COMPUTE_REGS=cfg.regs, num_warps=4, maxnreg=cfg.maxnreg)  # fmt: skip
    # its site launches as launch() does (the recorder's sites take the general launch)
    gluon_fwd.site((5, 8), head_dim=128, max_seg=4, flags=flags)(("t",), (), (3,))
    assert rec.launches[1] == ((5, 8, 1), ("t", 3), const, None)
    gluon_fwd.launch((5, 8), ("args",), head_dim=128, max_seg=4, flags=flags,
                     config=gluon_fwd.FwdConfig(64, 3, 232, 160))
    const = rec.launches[2][2]
    assert (const["BLOCK_N"], const["STAGES"], const["COMPUTE_REGS"], const["maxnreg"]) == (64, 3, 232, 160)


def test_where_it_cannot_run_the_reason_names_the_value(monkeypatch):
    check_reasons(monkeypatch, gluon_fwd, block=(128, 64, "query blocks of 64 rows (the kernel takes 128)"),
                  head_dims=(128, 64, "128"))
