"""The Hugging Face integration on tiny random-initialised models built from configs (no
downloads): Llama and Qwen2 with ``Dense()`` registered match ``attn_implementation="sdpa"``
(logits and gradients, left padding included; greedy ``generate``), a sparse pattern matches a
plain-torch masked attention over the same decisions, and what the op does not compute is
refused. CPU, Triton's interpreter; skipped where transformers is not installed (``pip install
'tilesparse[transformers]'``).
"""

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the transformers extra (part of the test extra)")
pytestmark = pytest.mark.transformers

import tilesparse as ts  # noqa: E402
from tilesparse.integrations.transformers import key_padding_from_mask, register  # noqa: E402

T = 24


def _config(arch: str, **kw):
    common = dict(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)  # fmt: skip
    common.update(kw)
    if arch == "llama":
        return transformers.LlamaConfig(**common)
    return transformers.Qwen2Config(**common)


def _models(arch: str, name: str, **kw):
    """The same random weights under sdpa and under ``name``, in float32."""
    cfg = _config(arch, **kw)
    cls = transformers.LlamaForCausalLM if arch == "llama" else transformers.Qwen2ForCausalLM
    torch.manual_seed(0)
    ref = cls._from_config(cfg, attn_implementation="sdpa").float()
    ours = cls._from_config(cfg, attn_implementation=name).float()
    ours.load_state_dict(ref.state_dict())
    return ref, ours


def _batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (2, T), generator=g)
    mask = torch.ones(2, T, dtype=torch.long)
    mask[1, :5] = 0  # left padding
    return ids, mask


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_dense_matches_sdpa_logits_and_gradients(arch):
    fn = register("ts-dense-test", ts.Dense())
    ref, ours = _models(arch, "ts-dense-test")
    ids, mask = _batch()
    valid = mask.bool()
    for m in (ref, ours):
        out = m(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(~valid, -100))
        out.loss.backward()
        m.logits = out.logits.detach()
    assert set(fn.ops) == {(0, True), (1, True)}  # both layers called the op
    torch.testing.assert_close(ours.logits[valid], ref.logits[valid], atol=2e-5, rtol=1e-4)
    for (n, p), (_, r) in zip(ours.named_parameters(), ref.named_parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad, atol=2e-5, rtol=1e-4, msg=lambda s, n=n: f"grad of {n}: {s}")


@pytest.mark.parametrize("spec", [ts.Dense(), ts.Hash(buckets=3)], ids=str)
def test_a_compiled_model_matches_eager(spec):
    """The model's forward and loss through torch.compile (what bench_llama_step.py --compile
    times), the registered op inside the traced model, decisions made in the call, a padded
    batch: one graph, no graph break (fullgraph), loss and gradients equal eager ones."""
    name = f"ts-compiled-{type(spec).__name__}"
    register(name, spec, backend="executor")
    _, ours = _models("llama", name)
    ours.eval()  # the same rotations every call, so eager and compiled draw the same
    ids, mask = _batch()
    labels = ids.masked_fill(~mask.bool(), -100)
    grads = []
    torch._dynamo.reset()
    for forward in (ours, torch.compile(ours, backend="aot_eager", fullgraph=True)):
        ours.zero_grad(set_to_none=True)
        loss = forward(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in ours.parameters()]))
    (eager, eager_grads), (compiled, compiled_grads) = grads
    torch.testing.assert_close(compiled, eager, atol=1e-5, rtol=1e-5)
    for g, w in zip(compiled_grads, eager_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("use_cache", [False, True])
def test_greedy_generate_matches_sdpa(use_cache):
    """With the cache, each step is the op with one query against the cached keys (Tq < Tk)."""
    register("ts-dense-gen", ts.Dense())
    ref, ours = _models("llama", "ts-dense-gen")
    ids, mask = _batch()
    kw = dict(attention_mask=mask, max_new_tokens=4, do_sample=False, use_cache=use_cache, pad_token_id=0)
    torch.testing.assert_close(ours.generate(ids, **kw), ref.generate(ids, **kw), atol=0, rtol=0)


def _reference_attention(ops):
    """A plain-torch attention with the Hash mask over the op's own (fixed) decisions."""

    def attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        op = ops[(module.layer_idx, True)]
        dec = op.decide(query, key)
        group = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(group, 1), value.repeat_interleave(group, 1)
        Tn = query.shape[2]
        keep = dec.q_bucket[..., :, None] == dec.k_bucket[..., None, :]
        keep &= torch.ones(Tn, Tn, dtype=torch.bool).tril()
        if attention_mask is not None:
            keep &= attention_mask
        s = (query @ k.transpose(-1, -2) * scaling).masked_fill(~keep, float("-inf"))
        p = torch.softmax(s, -1).nan_to_num(0.0)  # an empty row: zeros
        return (p @ v).transpose(1, 2).contiguous(), None

    return attention


def test_sparse_pattern_matches_a_reference_of_the_same_mask():
    fn = register("ts-hash-test", ts.Hash(buckets=3), backend="triton", seed=5)
    _, ours = _models("llama", "ts-hash-test")
    ours.eval()
    transformers.AttentionInterface.register("ts-hash-ref", _reference_attention(fn.ops))
    transformers.masking_utils.AttentionMaskInterface.register(
        "ts-hash-ref", transformers.masking_utils.ALL_MASK_ATTENTION_FUNCTIONS["sdpa"]
    )
    ids, mask = _batch()
    with torch.no_grad():
        got = ours(input_ids=ids, attention_mask=mask).logits
        again = ours(input_ids=ids, attention_mask=mask).logits
        ours.set_attn_implementation("ts-hash-ref")
        want = ours(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(got, again)  # eval(): the same rotations every call
    valid = mask.bool()
    torch.testing.assert_close(got[valid], want[valid], atol=2e-5, rtol=1e-4)


def test_per_layer_specs_and_training_resamples():
    fn = register("ts-layers", ts.Hash(buckets=4), layers=lambda i: None if i == 0 else ts.Hash(buckets=2), backend="executor")
    _, ours = _models("llama", "ts-layers")
    ids, _ = _batch()
    ours.train()
    a = ours(input_ids=ids).logits
    b = ours(input_ids=ids).logits
    assert not torch.equal(a, b)  # training: fresh rotations per call
    assert fn.ops[(0, True)].spec == ts.Dense() and fn.ops[(1, True)].spec == ts.Hash(buckets=2)


def test_the_mask_builder_hands_over_key_padding_and_sdpa_masks_for_the_rest():
    from transformers.masking_utils import and_masks, bidirectional_mask_function, causal_mask_function, sdpa_mask

    from tilesparse.integrations.transformers import padding_mask

    pad = torch.ones(2, 6, dtype=torch.bool)
    pad[1, :2] = False
    kw = dict(batch_size=2, q_length=6, kv_length=6, attention_mask=pad)
    assert torch.equal(padding_mask(**kw, mask_function=causal_mask_function), pad)
    # under a bidirectional mask: (B, 1, Tk), so the attention function can check the module's causality
    assert torch.equal(padding_mask(**kw, mask_function=bidirectional_mask_function), pad[:, None])
    assert torch.equal(key_padding_from_mask(pad[:, None], causal=False, batch=2, q_len=6, k_len=6), pad)
    for mask, causal in ((pad, False), (pad[:, None], True)):
        with pytest.raises(ValueError, match="mask but the attention module has is_causal"):
            key_padding_from_mask(mask, causal=causal, batch=2, q_len=6, k_len=6)
    assert padding_mask(**{**kw, "attention_mask": None}, mask_function=causal_mask_function) is None
    # one query at the end of a cache: the same fast path
    assert torch.equal(padding_mask(**{**kw, "q_length": 1, "q_offset": 5}, mask_function=causal_mask_function), pad)
    # anything more than causality and padding (here packed documents, a window, queries not at the
    # end): SDPA's 4D mask, which the attention function checks
    docs = and_masks(causal_mask_function, lambda b, h, q, kv: (q < 3) == (kv < 3))
    for extra in (dict(mask_function=docs), dict(mask_function=causal_mask_function, local_size=3),
                  dict(mask_function=causal_mask_function, q_length=2, q_offset=1)):  # fmt: skip
        got = padding_mask(**{**kw, **extra, "allow_is_causal_skip": False})
        want = sdpa_mask(**{**kw, **extra, "allow_is_causal_skip": False})
        assert got.dim() == 4 and torch.equal(got, want)


def test_refusals():
    register("ts-refuse", ts.Dense())
    _, ours = _models("llama", "ts-refuse", attention_dropout=0.1)
    ids, _ = _batch()
    ours.train()
    with pytest.raises(ValueError, match="attention dropout=0.1 in training mode is not supported"):
        ours(input_ids=ids)
    ours.eval()
    ours(input_ids=ids)  # eval: the model passes dropout=0.0
    cfg = transformers.MistralConfig(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, sliding_window=8)  # fmt: skip
    mistral = transformers.MistralForCausalLM._from_config(cfg, attn_implementation="ts-refuse")
    with pytest.raises(ValueError, match="sliding_window=8 is not supported"):
        mistral(input_ids=ids)
    packed = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
    packed[..., 2:, :2] = False  # two documents: not padding
    with pytest.raises(ValueError, match="not key padding AND causality"):
        key_padding_from_mask(packed, causal=True, batch=1, q_len=4, k_len=4)
    padded = torch.ones(1, 1, 4, 4, dtype=torch.bool).tril()
    padded[..., 0] = False
    assert key_padding_from_mask(padded, causal=True, batch=1, q_len=4, k_len=4).tolist() == [[False, True, True, True]]


def test_cuda_graphs_replays_the_layers_calls():
    """``register(..., cuda_graphs=True)``: each layer's op replays its training calls (the model's
    ``scaling`` is the op's own scale, so a call without padding is plain); here through the
    CPU stand-in for a CUDA graph (tilesparse.graphs.RerunRecorder), installed after the first
    call made the ops (which ran eagerly: the inputs are on the CPU)."""
    from tilesparse.graphs import RerunRecorder

    with pytest.raises(TypeError, match="cuda_graphs must be a bool"):
        register("ts-graphs-bad", ts.Hash(buckets=2), cuda_graphs="yes")
    attention = register("ts-graphs", ts.Hash(buckets=2), cuda_graphs=True)
    ref, ours = _models("llama", "ts-graphs")
    ids, _ = _batch()
    ours.train()
    ours(input_ids=ids)
    assert {op.graph_stats.eager["inputs on cpu, not CUDA"] for op in attention.ops.values()} == {1}
    for op in attention.ops.values():
        op._graphed().recorder = RerunRecorder
    for _ in range(2):
        ours(input_ids=ids, labels=ids).loss.backward()
    for op in attention.ops.values():
        assert op.graph_stats.captures == 1 and op.graph_stats.replays == 2
        assert sum(op.graph_stats.eager.values()) == 1
    assert all(p.grad is not None and p.grad.isfinite().all() for p in ours.parameters() if p.requires_grad)
