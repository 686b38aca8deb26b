"""A pickled, deep-copied or ``torch.save``d op (alone or inside a module) is the same op, eager
and under ``torch.compile``, in this process and in a fresh one, even where another op was
compiled first there (the custom ops find an op by a key that each copy takes anew). CPU.
"""

import copy
import gc
import io
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

import tilesparse as ts

ROOT = Path(__file__).resolve().parents[1]


def _inputs():
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(1, 2, 70, 16, generator=g) for _ in range(3))


def _compiled(op):
    return torch.compile(lambda q, k, v, d: op(q, k, v, decisions=d), fullgraph=True, backend="eager")


def test_copies_in_this_process_run_the_same_op_eager_and_compiled():
    q, k, v = _inputs()
    attn = ts.compile(ts.Hash(buckets=4), causal=False, backend="reference")
    dec = attn.decide(q, k)
    want = attn(q, k, v, decisions=dec)
    pickled, deep = pickle.loads(pickle.dumps(attn)), copy.deepcopy(attn)
    module = torch.nn.Module()
    module.attn = attn
    buf = io.BytesIO()
    torch.save(module, buf)
    del attn, module
    gc.collect()  # the original is gone: no copy may depend on it
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False).attn
    keys = {op._key for op in (pickled, deep, loaded)}
    assert len(keys) == 3
    for op in (pickled, deep, loaded):
        assert op.spec == ts.Hash(buckets=4) and op.causal is False
        torch.testing.assert_close(op(q, k, v, decisions=dec), want, rtol=0, atol=0)
        torch.testing.assert_close(_compiled(op)(q, k, v, dec), want, rtol=0, atol=0)


def test_a_module_saved_here_runs_the_same_op_in_a_fresh_process(tmp_path):
    q, k, v = _inputs()
    attn = ts.compile(ts.Hash(buckets=4), causal=False, backend="reference")
    dec = attn.decide(q, k)
    module = torch.nn.Module()
    module.attn = attn
    torch.save({"module": module, "q": q, "k": k, "v": v, "dec": dec, "want": attn(q, k, v, decisions=dec)},
               tmp_path / "op.pt")  # fmt: skip
    script = textwrap.dedent(f"""
        import torch, tilesparse as ts
        first = ts.compile(ts.QKDrop(keep=0.5))  # takes this process's first key
        d = torch.load({str(tmp_path / "op.pt")!r}, weights_only=False)
        op = d["module"].attn
        eager = op(d["q"], d["k"], d["v"], decisions=d["dec"])
        f = torch.compile(lambda q, k, v, dec: op(q, k, v, decisions=dec), fullgraph=True, backend="eager")
        compiled = f(d["q"], d["k"], d["v"], d["dec"])
        assert torch.equal(eager, d["want"]), "eager differs"
        assert torch.equal(compiled, d["want"]), "compiled differs"
        print("same op")
    """)
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "same op" in r.stdout, r.stdout + r.stderr
