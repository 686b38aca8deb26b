"""Which dK/dV kernel the Triton backend launches, on the CPU: the rule that picks the
warp-specialized Gluon kernel (op.ws_dkdv), the reasons explain() gives when it does not, and
how its launch stands in for the Triton kernel's unchanged variant (nonfinite.launch_pair) with
the Triton kernel's flags and its own launch shape (gluon_dkdv.launch), and that its predicates
are the Triton kernels' statement for statement. The kernel itself runs on Hopper only:
tests/gpu/test_gluon_dkdv_gpu.py.
"""

from __future__ import annotations

import ast
import inspect
import textwrap

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton import gluon_dkdv, nonfinite, op
from tilesparse.backends.triton.op import override_config, segment_rows, tile_config, ws_dkdv, ws_dkdv_reason


def _group(spec, T, Tk=None, H=4, Hkv=2):
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, H, T, 64), generator=g)
    k, v = (torch.randn((1, Hkv, Tk or T, 64), generator=g) for _ in range(2))
    attn = ts.compile(spec, causal=True, backend="triton")
    dec = attn.decide(q, k, generator=g)
    return q, attn.prepare(q, k, v, decisions=dec).groups[0]


def test_explain_names_the_kernel_and_why_not_the_warp_specialized_one():
    q = torch.randn((1, 2, 40, 64))
    text = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton").explain(q, q, q)
    line = next(s for s in text.splitlines() if s.startswith("kernels: "))
    assert "triton dK/dV: the Triton kernel (the warp-specialized one does not run: Gluon kernels do not run " \
           "under TRITON_INTERPRET=1)" in line  # fmt: skip
    assert "kernels: " not in ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="executor").explain(q, q, q)


def test_the_reasons_in_their_order(monkeypatch):
    q = torch.empty((1, 1, 1, 64), dtype=torch.bfloat16)
    cfg = tile_config(64, torch.bfloat16, torch.device("cpu"))
    assert "TRITON_INTERPRET=1" in ws_dkdv_reason(q, cfg)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert ws_dkdv_reason(q, cfg) == "not on a CUDA device"
    assert not ws_dkdv(cfg, q)


def test_the_configurations_take_it_at_the_measured_head_dims():
    """16-bit D=64 from 1,024-row bucket segments, D=128 from 256 (run 113); nowhere else: the
    kernel has no other head dim, and fp32 runs the Triton kernel."""
    rows = {64: 1024, 128: 256}
    want = {(D, dtype): n for D, n in rows.items() for dtype in (torch.float16, torch.bfloat16)}
    for D in (32, 64, 96, 128, 256):
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            assert tile_config(D, dtype, torch.device("cuda")).ws_dkdv == want.get((D, dtype), 0), (D, dtype)
    assert tile_config(64, torch.bfloat16, torch.device("cpu")).ws_dkdv == 0


def test_segment_rows_from_sizes_and_spec():
    _, g = _group(ts.Hash(buckets=4), T=100, Tk=140)
    assert segment_rows(g) == 100 / 4
    _, g = _group(ts.QKDrop(keep=0.5), T=100)
    assert segment_rows(g) == 100 * 0.5


def test_bucket_groups_take_it_from_a_segment_length(monkeypatch):
    check_segment_rule(monkeypatch, "ws_dkdv")


def check_segment_rule(monkeypatch, field: str):
    """``op.<field>``'s rule (ws_dkdv, ws_dq, ws_fwd), its device reason stubbed as on a GPU that can
    run the kernel: bucket groups take it from ``TileConfig.<field>`` rows a segment, groups without
    a bucket predicate at any length. Returns the query, the drop group and the rule."""
    rule = getattr(op, field)
    monkeypatch.setattr(op, f"{field}_reason", lambda q, cfg: None)
    q, hashed = _group(ts.Hash(buckets=4), T=120)  # 30-row segments
    _, dropped = _group(ts.QKDrop(keep=0.2), T=120)  # no bucket predicate: taken at any length
    for rows, taken in ((1, True), (30, True), (31, False)):
        with override_config(**{field: rows}):
            cfg = tile_config(64, q.dtype, q.device)
            assert rule(cfg, q, hashed) is taken, rows
            assert rule(cfg, q, dropped) and rule(cfg, q), rows
    return q, dropped, rule


class _Recorder:
    """Stands in for a LeanKernel: records each launch's grid, arguments and constants (its
    sites take the general launch: ``lean_now`` is false)."""

    def __init__(self):
        self.launches = []

    def lean_now(self):
        return False

    def launch(self, grid, args, constants, keyed=None):
        self.launches.append((grid, args, dict(constants), keyed))


def record_sites(monkeypatch, module) -> list:
    """``module.site`` (a Gluon module's) replaced by one that records its grid and keywords and
    returns a stand-in recording its calls, each returning "reading": the list of (grid,
    keywords, calls) per site made."""
    sites = []

    def site(grid, **kw):
        calls = []
        sites.append((grid, kw, calls))
        return lambda tensors, rest, scalars, reading=None: calls.append((tensors, rest, scalars, reading)) or "reading"

    monkeypatch.setattr(module, "site", site)
    return sites


def test_launch_pair_runs_the_stand_in_then_the_sanitizing_variant(monkeypatch):
    rec = _Recorder()
    monkeypatch.setattr(op, "lean", lambda kernel: rec)
    stood_in = []
    pair = op.Launch((3, 2), (), {"X": 1}, lambda *args: stood_in.append(args) or None)
    nonfinite.launch_pair("kernel", pair, ("a",), (), ("b",))
    assert stood_in == [(("a",), (), ("b",))]
    assert rec.launches == [((3, 2, 1), ("a", "b"), {"X": 1, "SANITIZE": True}, None)]
    rec.launches.clear()
    nonfinite.launch_pair("kernel", op.Launch((3, 2), (), {"X": 1}, None), ("a",), (), ("b",))
    assert [c for *_, c, _ in rec.launches] == [{"X": 1}, {"X": 1, "SANITIZE": True}]
    rec.launches.clear()
    nonfinite.launch_pair("kernel", op.Launch((3, 2), (), {"X": 1}, None), ("a",), (), ("b",), sanitize=False)
    assert [c for *_, c, _ in rec.launches] == [{"X": 1}]


@pytest.mark.parametrize("D", [64, 128])
def test_gluon_launch_takes_the_flags_and_its_launch_shape(monkeypatch, D):
    rec = _Recorder()
    monkeypatch.setattr(gluon_dkdv, "_launcher", lambda: rec)
    flags = dict(CAUSAL=True, STRICT=False, SAME_BUCKET=True, NOT_SELF=False, SINGLE_LOOP=True)
    gluon_dkdv.launch((5, 8), ("args",), head_dim=D, per_query_head=True, max_seg=4, flags=flags)
    cfg = gluon_dkdv.ws_config(D)
    ((grid, args, const, _),) = rec.launches
    assert grid == (5, 8) and args == ("args",)
    assert const == dict(DKV_PER_QUERY_HEAD=True, HEAD_DIM=D, BLOCK_M=cfg.block_m, BLOCK_N=64, MAX_SEG=4, **flags,
                         STAGES=cfg.stages, COMPUTE_REGS=cfg.regs, num_warps=4, maxnreg=cfg.maxnreg)  # fmt: skip
    gluon_dkdv.site((5, 8), head_dim=D, per_query_head=True, max_seg=4, flags=flags)(("t",), (), (3,))
    assert rec.launches[1] == ((5, 8, 1), ("t", 3), const, None)  # its site launches as launch() does
    other = gluon_dkdv.WsConfig(16, 3, 200, 255)
    gluon_dkdv.launch((5, 8), ("args",), head_dim=D, per_query_head=False, max_seg=4, flags=flags, config=other)
    const = rec.launches[2][2]
    assert (const["BLOCK_M"], const["STAGES"], const["COMPUTE_REGS"], const["maxnreg"]) == (16, 3, 200, 255)
    assert const["DKV_PER_QUERY_HEAD"] is False


@pytest.mark.parametrize("Hkv", [4, 2])
def test_the_backward_hands_the_dkdv_launch_to_it(monkeypatch, Hkv):
    """With the kernel taken, the dK/dV launch pair runs gluon_dkdv's site at the Triton kernel's
    grid on its runtime arguments but the workspace, per query head where kv heads are shared, with the group's
    flags, then the sanitizing variant; the launch pair hands the sanitizing variant the reading
    the site returned."""
    monkeypatch.setattr(op, "ws_dkdv", lambda cfg, q, g=None: True)
    monkeypatch.setattr(op, "ws_dq", lambda cfg, q, g=None: False)
    sites, pairs = record_sites(monkeypatch, gluon_dkdv), []
    rec = _Recorder()
    real_lean = op.lean
    monkeypatch.setattr(op, "lean", lambda kernel: rec if kernel is op.kernels._attn_bwd_dkdv else real_lean(kernel))
    real_pair = op.launch_pair

    def pair(kernel, launch, tensors, rest, scalars, sanitize=True):
        pairs.append((kernel, launch.grid, (tensors, rest, scalars)))
        if kernel is op.kernels._attn_bwd_dkdv:
            real_pair(kernel, launch, tensors, rest, scalars, sanitize=sanitize)

    monkeypatch.setattr(op, "launch_pair", pair)
    q, g = _group(ts.Hash(buckets=4), T=120, H=4, Hkv=Hkv)
    q = q.requires_grad_()
    k, v = (torch.randn((1, Hkv, 120, 64), requires_grad=True) for _ in range(2))
    cfg = tile_config(64, q.dtype, q.device)
    o = op.sparse_attention(q, k, v, g, 0.125, cfg)  # the pairs are recorded: no attention kernel runs
    o.backward(torch.ones_like(o))
    ((kernel, grid, args),) = [p for p in pairs if p[0] is op.kernels._attn_bwd_dkdv]
    ((got_grid, kw, calls),) = sites
    tensors, rest, scalars = args
    assert got_grid == grid == (g.k_ranges.shape[2], 4) and calls == [(tensors[:-1], rest, scalars, None)]  # no workspace
    assert kw == dict(head_dim=64, per_query_head=Hkv != 4, max_seg=g.k_ranges.shape[3], flags=op._flags(g, cfg))
    # the sanitizing variant after it, through the Triton kernel's site (the recorder: its general launch)
    ((_, got_args, const, _),) = rec.launches
    assert got_args == (*args[0], *args[1], *args[2]) and const["SANITIZE"] is True


def test_no_launch_shape_outside_64_and_128():
    assert gluon_dkdv.ws_config(32) is None and gluon_dkdv.ws_config(256) is None


def _body(fn) -> str:
    """The statements of a (Triton or Gluon) jit function, docstring dropped, ``gl`` read as ``tl``."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn.fn))).body[0]
    body = tree.body[1:] if isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant) \
        else tree.body  # fmt: skip
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and node.id == "gl":
            node.id = "tl"
    return "\n".join(ast.dump(s) for s in body)


def test_the_predicates_mirror_the_triton_kernels():
    """A Gluon kernel cannot call a triton.jit function, so gluon_dkdv._keep is kernels._tile_keep
    written again: the same statements, or the two kernels mask different pairs."""
    from tilesparse.backends.triton import kernels

    assert _body(gluon_dkdv._keep) == _body(kernels._tile_keep)
    assert _body(gluon_dkdv._keep) != _body(kernels._flag_nonfinite)  # the comparison can tell functions apart


def test_where_it_cannot_run_the_reason_names_the_value(monkeypatch):
    check_reasons(monkeypatch, gluon_dkdv, block=(64, 32, "key blocks of 32 rows (the kernel takes 64)"),
                  head_dims=(64, 96, "64 and 128"))


def check_reasons(monkeypatch, module, *, block: tuple[int, int, str], head_dims: tuple[int, int, str]) -> None:
    """``module.unusable`` (gluon_dkdv, gluon_dq, gluon_fwd) on a stand-in device: each reason quotes
    what it got and what the kernel takes. ``block``: the block size the kernel takes, one it does
    not, and the reason for that one; ``head_dims``: a head dim it takes besides 128, one it does
    not, and the head dims its reason lists."""
    cap, release = [(9, 0)], [sorted(module.GLUON_TRITON)[0]]
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cap[0])
    monkeypatch.setattr(gluon_dkdv, "installed_triton", lambda: release[0])  # gluon_dkdv.gluon_reason reads it
    (good_block, bad_block, block_words), (other_dim, bad_dim, dims_words) = block, head_dims

    def reason(dtype=torch.bfloat16, D=128, size=good_block):
        module._unusable_on.cache_clear()
        return module._unusable_on(0, dtype, D, size)

    try:
        assert reason() is None and reason(torch.float16, other_dim) is None
        assert reason(torch.float32) == "torch.float32 (the kernel takes fp16 and bf16)"
        assert reason(D=bad_dim) == f"head dim {bad_dim} (the kernel takes {dims_words})"
        assert reason(size=bad_block) == block_words
        release[0] = (3, 9)
        assert reason() == f"Triton 3.9 (the kernel is run on {sorted(module.GLUON_TRITON)} only)"
        cap[0] = (8, 0)
        assert reason() == "GPU compute capability (8, 0) is not (9, 0) (Hopper)"
    finally:
        module._unusable_on.cache_clear()
