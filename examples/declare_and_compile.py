"""Declare every built-in pattern, compile it, run it forward and backward, check it against
the reference and print its plan.

Runs on CPU in seconds and unchanged on a GPU. On a GPU, backend "auto" picks per head group
the backend the planner prices cheapest; on CPU, where "auto" would pick the reference itself,
the op runs on "executor" (the torch model of the tile-skipping kernels: the same index
tensors, the same tile walk), so the comparison is always a sparse backend against the
reference, never the reference against itself.

    python examples/declare_and_compile.py
"""

import torch

import tilesparse as ts

device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
# largest |error| allowed, relative to the reference's largest magnitude (fp32 on a GPU may use TF32)
tolerance = {torch.float32: 1e-3, torch.bfloat16: 5e-2}[dtype]
B, H, T, D = 1, 4, 256, 64
backend = "auto" if device == "cuda" else "executor"

patterns = {
    "dense": ts.Dense(),
    "qk-drop": ts.QKDrop(keep=0.5),
    "hash": ts.Hash(buckets=8),
    "hash, not self (Reformer)": ts.Hash(buckets=8, attend_self=False),
    "top-k features": ts.TopKFeatures(k=8),
    "hybrid: hash and qk-drop": ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.5)]),
    "per head: heads 0, 1 dense": ts.PerHead(dense_heads=[0, 1], rest=ts.Hash(buckets=8)),
}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().float(), want.detach().float()
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-6))


gen = torch.Generator(device).manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, device=device, generator=gen).to(dtype).requires_grad_() for _ in range(3))
dout = torch.randn(B, H, T, D, device=device, generator=gen)

for name, spec in patterns.items():
    # a spec is plain data: it round-trips through JSON exactly
    assert ts.parse_spec(spec.model_dump_json()) == spec
    attn = ts.compile(spec, causal=True, backend=backend)
    ran_on = sorted({a.backend.NAME for a in attn.plan(q, k, v).assignments})
    assert "reference" not in ran_on, f"{name}: the op must not run on the reference it is checked against"

    # draw the decisions once, so the op and the reference see the same ones
    decisions = attn.decide(q, k, generator=torch.Generator(device).manual_seed(1))
    out = attn(q, k, v, decisions=decisions)
    ref = attn.reference(q, k, v, decisions=decisions)  # masked dense attention, float32

    grads = torch.autograd.grad(out, (q, k, v), dout.to(out.dtype))
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)
    errors = [relative_error(out, ref)] + [relative_error(g, r) for g, r in zip(grads, ref_grads, strict=True)]
    assert max(errors) <= tolerance, f"{name}: relative errors (out, dq, dk, dv) {errors} > {tolerance}"

    print(f"== {name}: {spec.model_dump_json()}")
    print(attn.explain(q, k, v, decisions=decisions))
    print(
        f"max relative error of {', '.join(ran_on)} against the reference: "
        f"output {errors[0]:.1e}, gradients {max(errors[1:]):.1e}\n"
    )

print(f"all {len(patterns)} patterns match the reference on {device}")
