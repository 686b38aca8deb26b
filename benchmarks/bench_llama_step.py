"""Step time of a Llama-like model with tilesparse attention through the Hugging Face
integration, and a packed-documents row.

Model (random init, from a config; no download): ``LlamaForCausalLM`` with 6 layers, width 1024,
8 heads of 128, 2 kv heads, MLP width ``--intermediate`` (default 2816), vocabulary 32,000,
bf16 weights. One step = forward + backward + AdamW step on a batch of 1 x T tokens (labels =
inputs). Attention implementations: ``sdpa`` (torch's), and tilesparse's ``Dense()``,
``Hash(buckets=16)`` and ``QKDrop(keep=0.7)`` registered with
``tilesparse.integrations.transformers.register`` (training mode: fresh decisions every step).

Each row reports, after ``--warmup`` steps:

- ``step_ms_sync``: the median of ``--steps`` steps, each synchronized (what a loop that waits
  on the loss sees);
- ``step_ms_async``: ``--steps`` steps back to back, one synchronization at the end, divided by
  the count (GPU time when the host keeps ahead); a gap between the two is host time;
- ``attention_ms``: the op alone, forward + backward on one layer's (1, 8, T, 128) q and
  (1, 2, T, 128) k, v, synchronized, times the layer count: the attention share of the step;
- ``speedup_vs_sdpa``: sdpa's ``step_ms_sync`` over the row's.

The packed row: ``--docs`` documents of random lengths (seeded) packed into ``--packed-t`` tokens,
the op alone (forward + backward, synchronized) for SDPA dense causal (no document mask, the
bound to beat), ``Dense()`` AND same-document, ``Hash(16)``, and ``Hash(16)`` AND same-document,
with the fraction of causal tiles each visits.

    python benchmarks/bench_llama_step.py --out benchmarks/results/llama_step_h200.json      # GPU
    python benchmarks/bench_llama_step.py --smoke --out /tmp/llama_step_smoke.json            # CPU, tiny

``--compile MODE`` runs every model's forward and loss through ``torch.compile`` (SDPA's and
ours alike: the rest of the model gets faster too, so attention is a larger share of the step;
``reduce-overhead`` also replays the step from CUDA graphs, which removes host time):

    python benchmarks/bench_llama_step.py --compile reduce-overhead --skip-packed --out benchmarks/results/llama_step_ro_h200.json
    python benchmarks/bench_llama_step.py --smoke --compile default --compile-backend aot_eager --out /tmp/s.json  # CPU

``--cuda-graphs`` registers the tilesparse rows with ``cuda_graphs=True`` (eager model, each
layer's op replaying its calls from CUDA graphs; the row counts captures, replays and calls
that ran eagerly).

Needs transformers (the ``transformers`` extra) and, on a GPU, Triton.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import tilesparse as ts  # noqa: E402
from tilesparse.bench.timing import sync, synchronized_ms  # noqa: E402
from tilesparse.integrations.transformers import register  # noqa: E402

from benchmarks.shared_options import add_head_options, add_run_options  # noqa: E402

SPECS = {"dense": ts.Dense(), "hash16": ts.Hash(buckets=16), "keep0.7": ts.QKDrop(keep=0.7)}


def build_model(args, impl: str, device: torch.device):
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.width, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(args.t, args.packed_t), attention_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM._from_config(cfg, attn_implementation=impl)
    return model.to(device=device, dtype=args.dtype).train()


def time_steps(step, device: torch.device, warmup: int, steps: int) -> dict:
    for _ in range(warmup):
        step()
    sync(device)
    synced = synchronized_ms(step, device, calls=steps)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return {"step_ms_sync": round(synced, 3), "step_ms_async": round(1e3 * (time.perf_counter() - t0) / steps, 3)}


def model_row(args, name: str, device: torch.device) -> dict:
    impl = "sdpa" if name == "sdpa" else f"tilesparse-bench-{name}"
    if name == SDPA_KEYPAD:
        register_sdpa_keypad(impl)
    elif name != "sdpa":
        ops = register(impl, SPECS[name], backend=args.backend, cuda_graphs=args.cuda_graphs).ops
    model = build_model(args, impl, device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, args.vocab, (1, args.t), device=device, generator=torch.Generator(device).manual_seed(1))

    # a training step keeps no KV cache (with one, every step builds a DynamicCache, which
    # torch.compile guards on and recompiles for)
    forward = lambda: model(input_ids=ids, labels=ids, use_cache=False).loss  # noqa: E731
    if args.compile != "none":
        mode = None if args.compile == "default" else args.compile
        with torch.no_grad():  # the integration makes each layer's op on its first call: outside the trace
            model(input_ids=ids[:, :128], use_cache=False)
        forward = torch.compile(forward, mode=mode, backend=args.compile_backend)

    def step():
        if args.compile == "reduce-overhead":
            torch.compiler.cudagraph_mark_step_begin()  # a new iteration: the last one's buffers may be reused
        loss = forward()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)  # under CUDA graphs a kept .grad would be a graph output buffer

    row = {"impl": name, "compile": args.compile, **time_steps(step, device, args.warmup, args.steps)}
    if args.cuda_graphs and name not in ("sdpa", SDPA_KEYPAD):
        stats = [op.graph_stats for op in ops.values()]
        row["cuda_graphs"] = {"captures": sum(s.captures for s in stats), "replays": sum(s.replays for s in stats),
                              "eager_calls": sum(sum(s.eager.values()) for s in stats)}  # fmt: skip
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    row["attention_ms"] = round(args.layers * op_ms(args, name, device, args.t), 3)
    return row


# transformers' own SDPA attention function behind tilesparse's mask builder (padding_mask): with
# no padding it gets no mask and runs SDPA with is_causal, under torch.compile too, where the
# stock "sdpa" builds and passes the (T, T) causal mask (transformers never skips it while
# tracing), which keeps SDPA off its flash and cuDNN kernels
SDPA_KEYPAD = "sdpa-keypad"


def register_sdpa_keypad(impl: str) -> None:
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface

    from tilesparse.integrations.transformers import padding_mask

    AttentionInterface.register(impl, sdpa_attention_forward)
    AttentionMaskInterface.register(impl, padding_mask)


def op_ms(args, name: str, device: torch.device, T: int, documents=None, spec=None) -> float:
    """Forward + backward of one layer's attention, synchronized, median of ``--steps``."""
    g = torch.Generator(device).manual_seed(2)
    D = args.width // args.heads
    q = torch.randn(1, args.heads, T, D, device=device, generator=g).to(args.dtype).requires_grad_()
    k, v = (torch.randn(1, args.kv_heads, T, D, device=device, generator=g).to(args.dtype).requires_grad_() for _ in range(2))
    if name in ("sdpa", SDPA_KEYPAD):
        def call():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    else:
        attn = ts.compile(spec or SPECS[name], causal=True, backend=args.backend, cuda_graphs=args.cuda_graphs)

        def call():
            return attn(q, k, v, document_ids=documents)

    def step():
        call().sum().backward()

    return time_steps(step, device, args.warmup, args.steps)["step_ms_sync"]


def packed_documents(args, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(3)
    cuts = torch.randperm(args.packed_t - 1, generator=g)[: args.docs - 1].add(1).sort().values
    ids = torch.zeros(args.packed_t, dtype=torch.int64)
    for c in cuts.tolist():
        ids[c:] += 1
    lengths = torch.bincount(ids).tolist()
    ids = ids[None].to(device)
    rows = {"sdpa_dense_causal_no_documents": op_ms(args, "sdpa", device, args.packed_t)}
    hash16 = ts.Hash(buckets=16)
    for label, spec, docs in (("dense_and_document", ts.Dense(), ids), ("hash16", hash16, None), ("hash16_and_document", hash16, ids)):
        rows[label] = op_ms(args, label, device, args.packed_t, documents=docs, spec=spec)
    causal_pairs = args.packed_t * (args.packed_t + 1) / 2
    same_doc_pairs = sum(n * (n + 1) / 2 for n in lengths)
    return {"T": args.packed_t, "documents": args.docs, "lengths": lengths, "fwd_bwd_ms": rows,
            "same_document_fraction_of_causal": round(same_doc_pairs / causal_pairs, 4)}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="JSON output path")
    p.add_argument("--t", type=int, default=16384)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=1024)
    add_head_options(p, heads=8, kv_heads=2)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--impls", default="sdpa,dense,hash16,keep0.7",
                   help=f"comma-separated: sdpa (transformers' stock SDPA), {SDPA_KEYPAD} (its SDPA function behind "
                        "tilesparse's mask builder: no (T, T) mask under torch.compile), or a tilesparse pattern")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--docs", type=int, default=8)
    p.add_argument("--packed-t", type=int, default=32768)
    p.add_argument("--compile", default="none", choices=("none", "default", "reduce-overhead", "max-autotune-no-cudagraphs"),
                   help="run each model's forward and loss through torch.compile in this mode, SDPA's as ours "
                        "(the op-alone attention_ms stays eager)")  # fmt: skip
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (aot_eager for a CPU smoke run)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="register the tilesparse rows with cuda_graphs=True (each layer's op replays its calls)")
    p.add_argument("--skip-packed", action="store_true", help="leave out the packed-documents row")
    add_run_options(p, smoke_help="CPU, tiny: checks the script runs, measures nothing")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() and not args.smoke else "cpu")
    args.dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    if args.smoke:
        args.t, args.layers, args.width, args.heads, args.kv_heads = 64, 1, 64, 2, 1
        args.intermediate, args.vocab, args.warmup, args.steps, args.docs, args.packed_t = 64, 64, 0, 1, 3, 128
    results = {
        "meta": {
            "script": "benchmarks/bench_llama_step.py", "command": " ".join(["python", *sys.argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "tilesparse": ts.__version__, "dtype": str(args.dtype).removeprefix("torch."),
            "model": {k: getattr(args, k) for k in ("t", "layers", "width", "heads", "kv_heads", "intermediate", "vocab")},
            "warmup": args.warmup, "steps": args.steps, "smoke": args.smoke,
            "compile": args.compile, "compile_backend": args.compile_backend if args.compile != "none" else None,
        },
        "rows": [],
    }  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for name in args.impls.split(","):
        try:
            results["rows"].append(model_row(args, name, device))
        except Exception as e:  # noqa: BLE001 - a failed row is a result; the others go on
            results["rows"].append({"impl": name, "error": f"{type(e).__name__}: {e}"[:2000]})
        print(results["rows"][-1], flush=True)
        out.write_text(json.dumps(results, indent=1))
    sdpa = [r for r in results["rows"] if r["impl"] in ("sdpa", SDPA_KEYPAD) and "step_ms_sync" in r]
    for r in results["rows"]:
        if sdpa and "step_ms_sync" in r:
            r["speedup_vs_sdpa"] = round(sdpa[0]["step_ms_sync"] / r["step_ms_sync"], 3)  # the first SDPA row
            r["speedup_vs_fastest_sdpa"] = round(min(x["step_ms_sync"] for x in sdpa) / r["step_ms_sync"], 3)
    if not args.skip_packed:
        try:
            results["packed"] = packed_documents(args, device)
        except Exception as e:  # noqa: BLE001
            results["packed"] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        print(results["packed"], flush=True)
    out.write_text(json.dumps(results, indent=1))
    return 1 if any("error" in r for r in results["rows"]) or "error" in results.get("packed", {}) else 0


if __name__ == "__main__":
    sys.exit(main())
