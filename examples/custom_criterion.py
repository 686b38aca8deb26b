"""Plug in your own criteria: register them by name, then name them in specs.

Two criteria, both deterministic (no generator needed):

- "norm-keep" (produces "keep", for QKDrop): in every (batch, head) keep the queries and the
  keys of largest L2 norm, a ``keep`` fraction of each;
- "projection-bucket" (produces "bucket", for Hash): a token's bucket is the argmax of its
  direction against ``buckets`` fixed random directions per head, the same for q and k.

A criterion takes ``(q, k, /, *, generator=None, **fields)``: q is (B, H, T, D), k is expanded
per query head to (B, H, T, D), and the spec's fields (``keep=``, ``buckets=``) arrive as
keywords. Its output is checked against the contract on every call.

Runs on CPU in seconds (backend "auto") and unchanged on a GPU.

    python examples/custom_criterion.py
"""

import torch

import tilesparse as ts
from tilesparse.testing import assert_equivalent

device = "cuda" if torch.cuda.is_available() else "cpu"
dtype = torch.bfloat16 if device == "cuda" else torch.float32
B, H, T, D = 2, 4, 256, 64


@ts.criterion("norm-keep", produces="keep")
def norm_keep(q, k, /, *, keep, generator=None):
    """Keep the round(keep * T) queries and keys of largest L2 norm per (batch, head)."""
    n = max(1, round(keep * q.shape[2]))

    def largest(x):
        top = x.float().norm(dim=-1).topk(n, dim=-1).indices
        return torch.zeros(x.shape[:-1], dtype=torch.bool, device=x.device).scatter_(-1, top, True)

    return largest(q), largest(k)


@ts.criterion("projection-bucket", produces="bucket")
def projection_bucket(q, k, /, *, buckets, generator=None):
    """Bucket of a token: argmax of its projections on ``buckets`` fixed random directions."""
    heads, dim = q.shape[1], q.shape[3]
    # fixed: drawn from a seeded CPU generator, so every call and every device sees the same
    directions = torch.randn((heads, dim, buckets), generator=torch.Generator().manual_seed(2024)).to(q.device)

    def bucket(x):
        x = torch.nn.functional.normalize(x.float(), dim=-1)
        return torch.einsum("bhtd,hdr->bhtr", x, directions).argmax(dim=-1).to(torch.int32)

    return bucket(q), bucket(k)


print("keep criteria:", ts.registered("keep"), " bucket criteria:", ts.registered("bucket"))

specs = [
    ts.QKDrop(keep=0.25, criterion="norm-keep"),
    ts.Hash(buckets=8, criterion="projection-bucket"),
    ts.Hybrid(parts=[ts.Hash(buckets=4, criterion="projection-bucket"), ts.QKDrop(keep=0.5, criterion="norm-keep")]),
    ts.PerHead(dense_heads=[0], rest=ts.QKDrop(keep=0.5, criterion="norm-keep")),
]


gen = torch.Generator(device).manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, device=device, generator=gen).to(dtype).requires_grad_() for _ in range(3))

for spec in specs:
    attn = ts.compile(spec, causal=True)
    decisions = attn.decide(q, k)
    # deterministic criteria: every call decides the same, no generator involved
    again = attn.decide(q, k)
    assert all(a is None or torch.equal(a, b) for (_, a), (_, b) in zip(decisions.items(), again.items(), strict=True))
    # output and the three gradients against masked dense attention, dtype-aware tolerances
    errors = assert_equivalent(attn, q, k, v, decisions=decisions)

    print(f"== {spec}")
    print(attn.explain(q, k, v, decisions=decisions))
    print("max |error| against the reference:", ", ".join(f"{n} {e:.1e}" for n, e in errors.items()), "\n")

# a spec refuses a criterion that produces the wrong kind of decision
try:
    ts.Hash(buckets=8, criterion="norm-keep")
except ValueError as e:  # a pydantic ValidationError
    print("refused as expected:", e.errors()[0]["msg"])
else:
    raise AssertionError("Hash accepted a keep criterion")


# and a criterion that breaks its contract is caught at the call, naming what is off
@ts.criterion("off-by-one-bucket", produces="bucket")
def off_by_one_bucket(q, k, /, *, buckets, generator=None):
    ids = torch.full(q.shape[:-1], buckets, dtype=torch.int32, device=q.device)  # one past the last bucket
    return ids, ids


try:
    ts.compile(ts.Hash(buckets=8, criterion="off-by-one-bucket"))(q, k, v)
except ValueError as e:
    print("caught as expected:", e)
else:
    raise AssertionError("a bucket id out of range went unnoticed")
print(f"custom criteria match the reference on {device}")
