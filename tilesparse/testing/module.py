"""A minimal model around a compiled attention, for checking that ``torch.compile`` traces a
user's pattern (tests here and on the GPU use it; so can a user's own tests)."""

from __future__ import annotations

from torch import Tensor, nn

__all__ = ["AttentionBlock"]


class AttentionBlock(nn.Module):
    """x (B, T, heads * head_dim) -> qkv projection -> ``attn`` -> output projection."""

    def __init__(self, attn, *, heads: int = 2, head_dim: int = 16):
        super().__init__()
        self.attn, self.heads = attn, heads
        self.qkv = nn.Linear(heads * head_dim, 3 * heads * head_dim)
        self.out = nn.Linear(heads * head_dim, heads * head_dim)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        return self.out(self.attn(q, k, v).transpose(1, 2).reshape(B, T, C))
