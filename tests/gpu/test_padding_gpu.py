"""Key padding, packed documents, SDPA keywords and the transformers integration on a real GPU
(H200), compiled Triton kernels: bf16/fp16/fp32 outputs and gradients against the reference
for every pattern with padding and documents (GQA, T up to 2,048), packed documents against
a dense block-diagonal SDPA mask, and a bf16 Llama with ``Dense()`` registered against
``attn_implementation="sdpa"`` (transformers 5.17 there).

Run: ``TRITON_INTERPRET=0 python3 -m pytest -q -m gpu tests/gpu/test_padding_gpu.py -p no:cacheprovider``.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.testing import assert_equivalent

from builtin_specs import one_of_each_kind

# the Hybrid's parts in the other order than one_of_each_kind's (the other GPU tests run that one)
SPECS = [
    *{**one_of_each_kind(keep=0.7, buckets=16, k=16, perhead_buckets=8),
      "hybrid": ts.Hybrid(parts=[ts.QKDrop(keep=0.6), ts.Hash(buckets=8)])}.values(),
    ts.Hash(buckets=16, attend_self=False),
]


def _packed(B: int, T: int, docs: int, g: torch.Generator) -> torch.Tensor:
    rows = []
    for _ in range(B):
        cuts = torch.randperm(T - 1, generator=g)[: docs - 1].add(1).sort().values
        row = torch.zeros(T, dtype=torch.int64)
        for c in cuts.tolist():
            row[c:] += 1
        rows.append(row)
    return torch.stack(rows).cuda()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("T", [257, 2048])
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_padding_and_documents_triton(spec, T, dtype):
    g = torch.Generator().manual_seed(T)
    q = torch.randn(2, 8, T, 64, generator=g).to("cuda", dtype)
    k, v = (torch.randn(2, 2, T, 64, generator=g).to("cuda", dtype) for _ in range(2))
    pad = torch.ones(2, T, dtype=torch.bool, device="cuda")
    pad[0, : T // 5] = False
    pad[1, -T // 7 :] = False
    ids = _packed(2, T, 8, g)
    for causal in (True, False):
        attn = ts.compile(spec, causal=causal, backend="triton")
        assert_equivalent(attn, q, k, v, key_padding_mask=pad, document_ids=ids)


def test_packed_documents_equal_block_diagonal_sdpa():
    g = torch.Generator().manual_seed(0)
    T = 4096
    q, k, v = (torch.randn(1, 8, T, 128, generator=g).to("cuda", torch.bfloat16) for _ in range(3))
    ids = _packed(1, T, 8, g)
    mask = (ids[:, None, :, None] == ids[:, None, None, :]) & torch.ones(T, T, dtype=torch.bool, device="cuda").tril()
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    got = ts.compile(ts.Dense(), backend="triton")(q, k, v, document_ids=ids)
    torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


def test_llama_dense_matches_sdpa_bf16():
    transformers = pytest.importorskip("transformers")
    from tilesparse.integrations.transformers import register

    register("ts-gpu-dense", ts.Dense())
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)  # fmt: skip
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="sdpa").cuda().float()
    ours = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation="ts-gpu-dense").cuda().float()
    ours.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 512, (2, 1024), device="cuda")
    mask = torch.ones(2, 1024, dtype=torch.long, device="cuda")
    mask[1, :100] = 0
    with torch.autocast("cuda", dtype=torch.bfloat16):
        a = ref(input_ids=ids, attention_mask=mask).logits
        b = ours(input_ids=ids, attention_mask=mask).logits
    valid = mask.bool()
    assert (a[valid].float() - b[valid].float()).abs().max() < 5e-2
