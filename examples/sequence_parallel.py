"""Sequence-parallel sparse attention inside a model whose other layers are sequence-sharded.

Each of P ranks holds a contiguous 1/P of every sequence: embeddings, norms, projections and
the MLP are per-token, so they run on the shard as they are. Only attention needs the whole
sequence: ``tilesparse.distributed.SequenceParallel`` wraps the compiled op with the same call,
exchanging heads for tokens with one all-to-all before the op and one after (DeepSpeed
Ulysses' scheme), so each rank attends H/P heads over the full sequence and the pattern's
criteria decide there, exactly as on one device. Parameter gradients are then summed over the
sequence-parallel group (as data parallelism sums them over its replicas).

The script trains one step of a tiny causal language model both ways, sharded over 2 processes
and whole in one, and checks that the loss and every parameter gradient agree. The pattern is
PerHead (head 0 dense, the others TopKFeatures, whose top-|x| criterion is deterministic);
with random criteria (QKDrop's Bernoulli, Hash's LSH) give each rank its own generator
(``sp(q, k, v, generator=...)``, seed + rank): each rank draws for its own heads.

    python examples/sequence_parallel.py                          # 2 processes on CPU (gloo)
    torchrun --nproc_per_node=2 examples/sequence_parallel.py     # under torchrun: NCCL on GPUs
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.distributed import SequenceParallel  # noqa: E402

VOCAB, WIDTH, HEADS, KV_HEADS, LAYERS, T = 256, 64, 4, 2, 2, 256
SPEC = ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=8))


class Block(nn.Module):
    """Pre-norm transformer block on a (B, T_shard, width) shard; ``attn`` is the op or its
    sequence-parallel wrapper (the same call)."""

    def __init__(self, attn):
        super().__init__()
        self.attn, self.head_dim = attn, WIDTH // HEADS
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, (HEADS + 2 * KV_HEADS) * self.head_dim, bias=False)
        self.proj = nn.Linear(WIDTH, WIDTH, bias=False)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        B, T_shard, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([HEADS * self.head_dim, KV_HEADS * self.head_dim,
                                                  KV_HEADS * self.head_dim], dim=-1)  # fmt: skip
        q, k, v = (t.view(B, T_shard, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        a = self.attn(q, k, v)  # (B, H, T_shard, D): this shard's rows of full-sequence attention
        x = x + self.proj(a.transpose(1, 2).reshape(B, T_shard, WIDTH))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.embed, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(T, WIDTH)
        self.blocks = nn.ModuleList(Block(attn) for _ in range(LAYERS))
        self.out = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, tokens, first: int = 0):
        """Logits of a (B, T_shard) shard whose first token sits at position ``first``."""
        positions = torch.arange(first, first + tokens.shape[1], device=tokens.device)  # global positions
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def loss_sum(model, tokens, targets, first: int = 0):
    """Summed cross-entropy over a shard's tokens: over the group it adds up to the whole's."""
    logits = model(tokens, first)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum")


def main(rank: int, world: int) -> None:
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    torch.manual_seed(0)  # the same weights and batch on every rank
    data = torch.randint(0, VOCAB, (2, T + 1), device=device)
    tokens, targets = data[:, :-1], data[:, 1:]
    attn = ts.compile(SPEC, causal=True)
    model = TinyLM(SequenceParallel(attn)).to(device)

    # the sharded step: each rank runs its tokens through every layer
    shard = T // world
    mine = slice(rank * shard, (rank + 1) * shard)
    loss = loss_sum(model, tokens[:, mine], targets[:, mine], first=rank * shard) / tokens.numel()
    loss.backward()
    for p in model.parameters():  # sum the parameter gradients over the sequence-parallel group
        dist.all_reduce(p.grad)
    loss = loss.detach()
    dist.all_reduce(loss)

    # the same step on one process, on the whole sequence
    whole = TinyLM(attn).to(device)
    whole.load_state_dict(model.state_dict())
    want = loss_sum(whole, tokens, targets) / tokens.numel()
    want.backward()
    grad_error = max(float((p.grad - w.grad).abs().max()) for p, w in zip(model.parameters(), whole.parameters()))
    loss_error = abs(float(loss) - float(want.detach()))
    ok = grad_error < 1e-4 and loss_error < 1e-5
    if rank == 0:
        print(f"{SPEC} over {world} ranks: loss {float(loss):.6f}, single process {float(want.detach()):.6f}, "
              f"largest parameter-gradient difference {grad_error:.2e}")  # fmt: skip
        print(("sequence parallel matches the single-process model" if ok else "MISMATCH") + f" on {device.type}")
    if not ok:
        raise SystemExit(1)


def _spawned(rank: int, world: int, init_file: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        main(rank, world)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    if "RANK" in os.environ:  # torchrun
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        try:
            main(dist.get_rank(), dist.get_world_size())
        finally:
            dist.destroy_process_group()
    else:
        import torch.multiprocessing as mp

        with tempfile.TemporaryDirectory() as tmp:
            mp.spawn(_spawned, args=(2, os.path.join(tmp, "rendezvous")), nprocs=2, join=True)
        sys.exit(0)
