"""Train a small GPT-style byte-level language model with tilesparse attention, one run per
attention variant, and compare speed and validation loss.

The model: ``--layers`` pre-norm transformer blocks (default 6, width 512, 8 heads of 64,
rotary positions, a 4x GELU MLP, tied embeddings), vocabulary 256 (bytes). The corpus: every
``.py`` file of the Python standard library (``sysconfig.get_paths()["stdlib"]``, sorted,
site-packages left out), split into train and validation by file (a file is in validation when
the CRC32 of its path relative to the stdlib is 0 mod 20, about 5%).

Attention is ``tilesparse.compile(spec, causal=True, backend=--backend)`` for the variant's
spec; the spec's criterion makes new decisions from the model's q and k at every call:

- ``dense``: ``Dense()`` (backend "auto" sends it to SDPA on a GPU)
- ``hash16``: ``Hash(buckets=16)`` (Reformer LSH on q and k)
- ``keep0.7``: ``QKDrop(keep=0.7)`` (Bernoulli: each query and key kept with probability 0.7)
- ``hybrid``: ``Hybrid(Hash(16), QKDrop(0.7))``

Two protocols run side by side (``--protocols``, default both):

- ``standard``: separate keys, the variants above; the baseline is ``dense``;
- ``shared-qk``: the SCFA paper's protocol after Reformer: keys are the L2-normalized queries
  (the key projection goes away) and no token attends to itself. Its variants are
  ``dense-noself`` (``Hash(buckets=1, attend_self=False)``: dense attention without the
  diagonal, Reformer's rule and the paper's dense baseline), ``hash16-noself``
  (``Hash(buckets=16, attend_self=False)``) and ``dense`` (shared QK attending to itself).

Each protocol's sparse runs are compared with its own baseline, at equal steps and at equal
training time (the baseline's and the run's losses at the last evaluation each reached within
the shorter of their two training times), and every run with the standard dense model
(``gap to standard dense``): parity within a protocol says nothing of the protocols' distance.
The ranking of each (protocol, T) group by validation loss is reported as stable when it is
the same at each of the last three evaluation steps the group has in common.

Every variant at a given T starts from the same initial weights (``--seed``), sees the same
batches in the same order (random windows of T + 1 bytes, ``--batch`` of them a step) and runs
the same number of steps (``--steps``, unless the time budget cuts a run short: then the
JSON says so). AdamW with linear warm-up and cosine decay, gradient clipping at 1; bf16
autocast on CUDA (the attention op gets bf16 q, k, v), float32 on the CPU. Validation loss is
taken every ``--eval-every`` steps (and at step 0) on fixed validation windows, about
``--val-tokens`` tokens, with the variant's own attention and fixed decision seeds.

Speed: each step is timed with ``time.perf_counter`` between CUDA synchronizations. The first
``--speed-skip`` steps (Triton compilation, the allocator warming up) are left out of
``step_ms`` and ``tokens_per_s`` (medians) and reported as ``warmup_s``. ``train_s`` (the
x-axis of the wall-clock plot) is the sum of all step times, evaluation excluded.

Output: ``--out DIR/NAME.json``, rewritten after every evaluation, so a run cut short keeps
what it has; then ``NAME.png`` when matplotlib is importable (the GPU machine may lack it:
redraw on any machine with ``python examples/train_lm.py --plot DIR/NAME.json``).
``--report NAME.json`` prints the README's table: per-step speed-up over dense and the
validation-loss gap at equal steps.

    python examples/train_lm.py --smoke                     # CPU, seconds: tiny model, T=256
    python examples/train_lm.py --device cuda --t 8192,16384 --steps 300 --out benchmarks/results
    python examples/train_lm.py --plot benchmarks/results/train_lm.json
    python examples/train_lm.py --report benchmarks/results/train_lm.json

Needs torch, triton (on a GPU) and pydantic; rich is not used, matplotlib only for the plot.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import sysconfig
import time
import traceback
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import tilesparse as ts  # noqa: E402

VARIANTS: dict[str, ts.Spec] = {
    "dense": ts.Dense(),
    "hash16": ts.Hash(buckets=16),
    "keep0.7": ts.QKDrop(keep=0.7),
    "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]),
}
SHARED_QK_VARIANTS: dict[str, ts.Spec] = {
    "dense-noself": ts.Hash(buckets=1, attend_self=False),
    "hash16-noself": ts.Hash(buckets=16, attend_self=False),
    "dense": ts.Dense(),
}
# protocol -> (variants, keys are the normalized queries, the baseline variant)
PROTOCOLS: dict[str, tuple[dict[str, ts.Spec], bool, str]] = {
    "standard": (VARIANTS, False, "dense"),
    "shared-qk": (SHARED_QK_VARIANTS, True, "dense-noself"),
}
VOCAB = 256


# ---------------------------------------------------------------------------------------------
# The corpus


def is_validation(relative_path: str) -> bool:
    """A file's split, by a hash of its path: about 1 in 20 files is for validation."""
    return zlib.crc32(relative_path.encode()) % 20 == 0


def load_corpus(max_files: int | None = None) -> tuple[Tensor, Tensor, dict]:
    """(train bytes, validation bytes) as uint8 tensors: the stdlib's .py files, sorted, each
    followed by a blank line; ``max_files`` takes every n-th file so the split keeps its mix."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file())
    if max_files is not None and len(files) > max_files:
        files = files[:: len(files) // max_files][:max_files]
    parts: dict[bool, list[bytes]] = {False: [], True: []}
    for p in files:
        parts[is_validation(p.relative_to(root).as_posix())].append(p.read_bytes() + b"\n\n")
    train, val = (torch.frombuffer(bytearray(b"".join(parts[s])), dtype=torch.uint8) for s in (False, True))
    info = {"stdlib": str(root), "files": len(files), "val_files": len(parts[True]),
            "train_bytes": train.numel(), "val_bytes": val.numel()}  # fmt: skip
    return train, val, info


def windows(data: Tensor, starts: Tensor, T: int) -> tuple[Tensor, Tensor]:
    """Inputs and next-byte targets, (len(starts), T) int64 each, from windows of T + 1 bytes."""
    idx = starts[:, None] + torch.arange(T + 1)
    chunk = data[idx].long()
    return chunk[:, :-1], chunk[:, 1:]


# ---------------------------------------------------------------------------------------------
# The model


@dataclass(frozen=True)
class ModelConfig:
    layers: int = 6
    width: int = 512
    heads: int = 8
    shared_qk: bool = False

    @property
    def head_dim(self) -> int:
        return self.width // self.heads


def rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary position embedding of x (B, H, T, D) by angles precomputed for T positions."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, attn: ts.CompiledAttention):
        super().__init__()
        self.cfg, self.attn = cfg, attn
        self.qkv = nn.Linear(cfg.width, (2 if cfg.shared_qk else 3) * cfg.width, bias=False)
        self.proj = nn.Linear(cfg.width, cfg.width, bias=False)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, generator: torch.Generator) -> Tensor:
        B, T, _ = x.shape
        parts = self.qkv(x).view(B, T, -1, self.cfg.heads, self.cfg.head_dim).transpose(1, 3).unbind(2)
        q = rotary(parts[0], cos, sin)
        # shared QK (Reformer, SCFA): the keys are the normalized queries
        # (F.normalize returns float32 under autocast: back to q's dtype, the op takes one dtype)
        k = F.normalize(q, dim=-1).to(q.dtype) if self.cfg.shared_qk else rotary(parts[1], cos, sin)
        v = parts[-1]
        # the op gets the autocast dtype as is; its own arithmetic runs outside autocast
        with torch.autocast(x.device.type, enabled=False):
            y = self.attn(q, k, v, generator=generator)
        return self.proj(y.transpose(1, 2).reshape(B, T, self.cfg.width))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, attn: ts.CompiledAttention):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(cfg.width), nn.LayerNorm(cfg.width)
        self.attention = Attention(cfg, attn)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.width, 4 * cfg.width, bias=False), nn.GELU(), nn.Linear(4 * cfg.width, cfg.width, bias=False)
        )

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, generator: torch.Generator) -> Tensor:
        x = x + self.attention(self.norm1(x), cos, sin, generator)
        return x + self.mlp(self.norm2(x))


class ByteGPT(nn.Module):
    """A GPT over bytes: embeddings, blocks, a final norm, logits by the tied embedding."""

    def __init__(self, cfg: ModelConfig, attn: ts.CompiledAttention):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(VOCAB, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg, attn) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.width)
        for name, p in self.named_parameters():
            if p.dim() == 2:  # GPT-2's init: residual projections scaled down with depth
                std = 0.02 / math.sqrt(2 * cfg.layers) if name.endswith(("proj.weight", "mlp.2.weight")) else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, tokens: Tensor, generator: torch.Generator) -> Tensor:
        T = tokens.shape[1]
        half = self.cfg.head_dim // 2
        freq = 10000.0 ** (-torch.arange(half, device=tokens.device, dtype=torch.float32) / half)
        angle = torch.arange(T, device=tokens.device, dtype=torch.float32)[:, None] * freq
        cos, sin = angle.cos(), angle.sin()
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, cos, sin, generator)
        return self.norm(x) @ self.embed.weight.t()


def lm_loss(model: ByteGPT, x: Tensor, y: Tensor, generator: torch.Generator, amp: bool) -> Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x, generator)
    return F.cross_entropy(logits.float().view(-1, VOCAB), y.reshape(-1))


# ---------------------------------------------------------------------------------------------
# One run: a variant at one T


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def learning_rate(step: int, args: argparse.Namespace) -> float:
    """Linear warm-up over ``--warmup`` steps, then cosine decay to a tenth."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(progress, 1.0))))


def train_run(
    record: dict, args: argparse.Namespace, corpus: tuple[Tensor, Tensor], device: torch.device,
    budget_s: float | None, save: Callable[[], None],
) -> None:  # fmt: skip
    """Train one model with ``record["variant"]``'s attention at sequence length ``record["T"]``,
    filling ``record`` in as it goes (``save`` writes it out after every evaluation, so a run
    that fails keeps what it measured). ``budget_s`` counts from the end of the warm-up steps:
    compilation never cuts a run short."""
    variant, T = record["variant"], record["T"]
    train, val = corpus
    amp = device.type == "cuda"
    variants, shared_qk, _ = PROTOCOLS[record.get("protocol", "standard")]
    spec = variants[variant]
    # --cuda-graphs: the op replays its calls from CUDA graphs (a slot per layer), drawing from the
    # same per-call generators as the eager runs
    attn = ts.compile(spec, causal=True, backend=args.backend, cuda_graphs=args.cuda_graphs)
    cfg = ModelConfig(args.layers, args.width, args.heads, shared_qk)
    torch.manual_seed(args.seed)
    model = ByteGPT(cfg, attn).to(device)
    groups = [  # weight decay on matrices only, not on norms
        {"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), **({"fused": True} if amp else {}))
    data_gen = torch.Generator().manual_seed(args.seed)  # the same batches for every variant
    decide_gen = torch.Generator(device).manual_seed(args.seed + 1)
    batch = args.batch or max(1, args.tokens_per_step // T)
    n_val = max(1, args.val_tokens // T)
    val_starts = torch.randint(0, val.numel() - T - 1, (n_val,), generator=torch.Generator().manual_seed(args.seed + 2))
    record.update({
        "spec": json.loads(spec.model_dump_json()), "batch": batch,
        "tokens_per_step": batch * T, "parameters": sum(p.numel() for p in model.parameters()),
        "val_windows": n_val, "steps_planned": args.steps, "steps_done": 0,
        "train_loss": [], "step_ms": [], "eval": [], "stopped": None, "error": None,
    })  # fmt: skip

    def evaluate(step: int, train_s: float) -> None:
        model.eval()
        losses = []
        with torch.no_grad():
            for i, start in enumerate(val_starts):
                x, y = windows(val, start.view(1), T)
                gen = torch.Generator(device).manual_seed(args.seed + 1000 + i)  # fixed decisions
                losses.append(float(lm_loss(model, x.to(device), y.to(device), gen, amp)))
        model.train()
        record["eval"].append({"step": step, "train_s": round(train_s, 4), "val_loss": round(statistics.fmean(losses), 5)})
        save()

    t_run = t_steady = time.perf_counter()
    train_s = 0.0
    evaluate(0, 0.0)
    for step in range(args.steps):
        if step == args.speed_skip:
            t_steady = time.perf_counter()
        if budget_s is not None and step > args.speed_skip and time.perf_counter() - t_steady > budget_s:
            record["stopped"] = f"time budget of {budget_s:.0f} s spent after {step} steps"
            break
        x, y = windows(train, torch.randint(0, train.numel() - T - 1, (batch,), generator=data_gen), T)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, args)
        _sync(device)
        t0 = time.perf_counter()
        loss = lm_loss(model, x, y, decide_gen, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        _sync(device)
        dt = time.perf_counter() - t0
        train_s += dt
        record["train_loss"].append(round(loss.item(), 5))
        record["step_ms"].append(round(1e3 * dt, 3))
        record["steps_done"] = step + 1
        if not math.isfinite(record["train_loss"][-1]):
            record["stopped"] = f"non-finite training loss at step {step}"
            break
        if (step + 1) % args.eval_every == 0 or step + 1 == args.steps:
            evaluate(step + 1, train_s)
    if record["eval"][-1]["step"] != record["steps_done"]:
        evaluate(record["steps_done"], train_s)
    record.update(speed(record["step_ms"], args.speed_skip, batch * T))
    record["run_s"] = round(time.perf_counter() - t_run, 2)
    if attn.graph_stats is not None:
        stats = attn.graph_stats
        record["cuda_graphs"] = {"captures": stats.captures, "replays": stats.replays, "eager": dict(stats.eager)}


def speed(step_ms: list[float], skip: int, tokens: int) -> dict:
    """Median step time and tokens/s without the first ``skip`` steps (compilation)."""
    steady = step_ms[skip:] or step_ms[-1:]
    out = {"warmup_s": round(sum(step_ms[:skip]) / 1e3, 3), "first_step_s": round(step_ms[0] / 1e3, 3) if step_ms else None}
    if steady:
        ms = statistics.median(steady)
        out.update(step_ms_median=round(ms, 3), step_ms_mean=round(statistics.fmean(steady), 3),
                   tokens_per_s=round(tokens / (ms / 1e3), 1))  # fmt: skip
    return out


# ---------------------------------------------------------------------------------------------
# The whole experiment


def run(args: argparse.Namespace) -> dict:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    seqlens = [int(t) for t in str(args.t).split(",")]
    protocols = args.protocols.split(",")
    if bad := [p for p in protocols if p not in PROTOCOLS]:
        raise SystemExit(f"unknown protocols {bad}; known: {list(PROTOCOLS)}")
    known = {v for p in protocols for v in PROTOCOLS[p][0]} | {f"{p}:{v}" for p in protocols for v in PROTOCOLS[p][0]}
    wanted = args.variants.split(",") if args.variants else None
    if wanted and (bad := [v for v in wanted if v not in known]):
        raise SystemExit(f"unknown variants {bad}; known in protocols {protocols}: {sorted(known)}")
    out = Path(args.out) / f"{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    train, val, corpus_info = load_corpus(args.max_files)
    too_short = min(train.numel(), val.numel()) <= max(seqlens) + 1
    if too_short:
        raise SystemExit(f"the corpus is too small for T={max(seqlens)}: {corpus_info}")
    results = {
        "meta": {
            "script": "examples/train_lm.py",
            "command": " ".join(["python", *sys.argv]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "python": platform.python_version(), "torch": torch.__version__, "tilesparse": ts.__version__,
            "triton": _version("triton"),
            "model": {**asdict(ModelConfig(args.layers, args.width, args.heads, protocols == ["shared-qk"])), "vocab": VOCAB},
            "protocols": protocols,
            "dtype": "bfloat16 autocast" if device.type == "cuda" else "float32",
            "corpus": corpus_info,
            "settings": {k: v for k, v in vars(args).items() if k not in ("plot", "report")},
        },
        "runs": [],
    }  # fmt: skip
    save = lambda: out.write_text(json.dumps(results, indent=1))  # noqa: E731
    work = [(p, v, T) for T in seqlens for p in protocols for v in PROTOCOLS[p][0]
            if not wanted or v in wanted or f"{p}:{v}" in wanted]
    for i, (protocol, variant, T) in enumerate(work):
        budget = None
        if args.time_budget_s:  # what is left, shared by the runs still to do
            budget = (args.time_budget_s - (time.perf_counter() - t_start)) / (len(work) - i)
        record = {"protocol": protocol, "variant": variant, "T": T}
        results["runs"].append(record)
        if budget is not None and budget <= 0:
            record["stopped"] = f"not run: the time budget of {args.time_budget_s} s was spent"
            continue
        print(f"[{time.perf_counter() - t_start:6.1f} s] {protocol} {variant} T={T}: training", flush=True)
        try:
            train_run(record, args, (train, val), device, budget, save)
        except Exception as e:  # noqa: BLE001 - a failed run is a result; the others go on
            record["error"] = f"{type(e).__name__}: {e}"[:2000]
            record["traceback"] = traceback.format_exc()[-4000:]
            print(record["traceback"], file=sys.stderr, flush=True)
        finally:
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(f"[{time.perf_counter() - t_start:6.1f} s] {_summary_line(record)}", flush=True)
        save()
    results["meta"]["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    save()
    print(f"json: {out}")
    try:
        print(f"png: {plot(results, out.with_suffix('.png'))}")
    except ImportError as e:
        print(f"no plot ({e}); draw it elsewhere: python examples/train_lm.py --plot {out}")
    print(report(results))
    print(protocol_report(results))
    return results


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except ImportError:
        return None


def _summary_line(r: dict) -> str:
    if r.get("error"):
        return f"{r['variant']} T={r['T']}: FAILED {r['error'][:300]}"
    last = r["eval"][-1] if r.get("eval") else {}
    return (
        f"{r['variant']} T={r['T']}: {r['steps_done']} steps, val loss {last.get('val_loss')}, "
        f"{r.get('step_ms_median')} ms/step, {r.get('tokens_per_s')} tok/s, warm-up {r.get('warmup_s')} s"
        + (f" ({r['stopped']})" if r.get("stopped") else "")
    )


# ---------------------------------------------------------------------------------------------
# Reading the results


def _load(results: dict | str | Path) -> dict:
    return results if isinstance(results, dict) else json.loads(Path(results).read_text())


def comparisons(results: dict | str | Path) -> list[dict]:
    """Per (T, variant): step time, tokens/s, speed-up per step over dense, and validation
    loss against dense's at the last evaluation step both reached (equal steps)."""
    runs = [r for r in _load(results)["runs"] if not r.get("error") and r.get("eval")]
    rows = []
    for r in runs:
        dense = next((d for d in runs if d["variant"] == "dense" and d["T"] == r["T"] and _label(d) == "dense"), None)
        row = {"variant": _label(r), "T": r["T"], "steps": r["steps_done"], "step_ms": r.get("step_ms_median"),
               "tokens_per_s": r.get("tokens_per_s"), "val_loss": r["eval"][-1]["val_loss"],
               "speedup": None, "eval_step": r["eval"][-1]["step"], "gap": None}  # fmt: skip
        if dense is not None:
            common = {e["step"] for e in dense["eval"]} & {e["step"] for e in r["eval"]}
            step = max(common)
            mine = next(e["val_loss"] for e in r["eval"] if e["step"] == step)
            row.update(eval_step=step, val_loss=mine)
            row["gap"] = round(mine - next(e["val_loss"] for e in dense["eval"] if e["step"] == step), 4)
            if r.get("step_ms_median") and dense.get("step_ms_median"):
                row["speedup"] = round(dense["step_ms_median"] / r["step_ms_median"], 3)
        rows.append(row)
    return rows


def _protocol(run: dict, meta: dict) -> str:
    return run.get("protocol") or ("shared-qk" if meta.get("model", {}).get("shared_qk") else "standard")


def _loss_at_time(run: dict, clock: list[float], t: float) -> tuple[int, float]:
    """(step, val loss) of the last evaluation reached within ``t`` training seconds."""
    reached = [e for e in run["eval"] if clock[e["step"]] <= t + 1e-9]
    e = reached[-1] if reached else run["eval"][0]
    return e["step"], e["val_loss"]


def protocol_comparisons(results: dict | str | Path) -> list[dict]:
    """Per (protocol, T, variant): the validation-loss gap to the protocol's baseline at equal
    steps and at equal training time, the gap to the standard dense model at equal steps, the
    speed-up per step over the baseline, and whether the group's ranking is stable."""
    results = _load(results)
    meta = results["meta"]
    skip = meta.get("settings", {}).get("speed_skip", 0)
    runs = [r for r in results["runs"] if not r.get("error") and r.get("eval")]
    rows = []
    for r in runs:
        proto = _protocol(r, meta)
        base_name = PROTOCOLS.get(proto, (None, None, "dense"))[2]
        same = [b for b in runs if b["T"] == r["T"] and _protocol(b, meta) == proto]
        base = next((b for b in same if b["variant"] == base_name), None)
        std = next((b for b in runs if b["T"] == r["T"] and _protocol(b, meta) == "standard" and b["variant"] == "dense"), None)
        row = {"protocol": proto, "variant": r["variant"], "T": r["T"], "baseline": base_name,
               "val_loss": r["eval"][-1]["val_loss"], "gap_steps": None, "step": None, "gap_time": None,
               "time_s": None, "speedup": None, "gap_standard_dense": None, "ranking_stable": _stable(same)}  # fmt: skip
        if base is not None:
            step = max({e["step"] for e in base["eval"]} & {e["step"] for e in r["eval"]})
            loss = lambda run, s: next(e["val_loss"] for e in run["eval"] if e["step"] == s)  # noqa: E731
            row.update(step=step, gap_steps=round(loss(r, step) - loss(base, step), 4))
            cr, cb = steady_clock(r, skip), steady_clock(base, skip)
            t = min(cr[r["eval"][-1]["step"]], cb[base["eval"][-1]["step"]])
            row.update(time_s=round(t, 2), gap_time=round(_loss_at_time(r, cr, t)[1] - _loss_at_time(base, cb, t)[1], 4))
            if r.get("step_ms_median") and base.get("step_ms_median"):
                row["speedup"] = round(base["step_ms_median"] / r["step_ms_median"], 3)
        if std is not None:
            step = max({e["step"] for e in std["eval"]} & {e["step"] for e in r["eval"]})
            mine = next(e["val_loss"] for e in r["eval"] if e["step"] == step)
            row["gap_standard_dense"] = round(mine - next(e["val_loss"] for e in std["eval"] if e["step"] == step), 4)
        rows.append(row)
    return rows


def _stable(group: list[dict]) -> bool | None:
    """Whether the group's order by validation loss is the same at its last three common
    evaluation steps (None with fewer than two runs or three common steps)."""
    if len(group) < 2:
        return None
    common = sorted(set.intersection(*({e["step"] for e in r["eval"]} for r in group)))[-3:]
    if len(common) < 3:
        return None
    orders = {tuple(sorted((r["variant"] for r in group),
                           key=lambda v: next(e["val_loss"] for e in next(r for r in group if r["variant"] == v)["eval"] if e["step"] == s)))
              for s in common}  # fmt: skip
    return len(orders) == 1


def protocol_report(results: dict | str | Path) -> str:
    """Both protocols side by side: gaps to the protocol's baseline at equal steps and at equal
    training time, and to the standard dense model."""
    f = lambda x, fmt: "-" if x is None else format(x, fmt)  # noqa: E731
    lines = [
        "| protocol | variant | T | speed-up per step over baseline | gap at equal steps (step) | "
        "gap at equal time (s) | gap to standard dense | ranking stable |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in protocol_comparisons(results):
        lines.append(
            f"| {r['protocol']} | {r['variant']} | {r['T']:,} | {f(r['speedup'], '.2f')}x vs {r['baseline']} | "
            f"{f(r['gap_steps'], '+.3f')} ({r['step']}) | {f(r['gap_time'], '+.3f')} ({r['time_s']}) | "
            f"{f(r['gap_standard_dense'], '+.3f')} | {'-' if r['ranking_stable'] is None else ('yes' if r['ranking_stable'] else 'no')} |"
        )
    return "\n".join(lines)


def _label(run: dict) -> str:
    """The variant's name, with its protocol when that is not the standard one."""
    proto = run.get("protocol", "standard")
    return run["variant"] if proto == "standard" else f"{run['variant']} ({proto})"


def report(results: dict | str | Path) -> str:
    """The README's table: one line per (T, variant)."""
    lines = [
        "| variant | T | steps | ms / step | tokens / s | speed-up per step over dense | val loss | gap to dense |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in comparisons(results):
        speedup = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        gap = "-" if r["gap"] is None else f"{r['gap']:+.3f}"
        lines.append(
            f"| {r['variant']} | {r['T']:,} | {r['eval_step']} | {r['step_ms']:.1f} | {r['tokens_per_s']:,.0f} | "
            f"{speedup} | {r['val_loss']:.3f} | {gap} |"
        )
    return "\n".join(lines)


def steady_clock(record: dict, skip: int) -> list[float]:
    """Training seconds after each step (index 0: before the first), with the first ``skip``
    steps (compilation) counted at the median step time of the rest."""
    ms = record["step_ms"]
    steady = statistics.median(ms[skip:] or ms or [0.0])
    clock = [0.0]
    for i, t in enumerate(ms):
        clock.append(clock[-1] + (steady if i < skip else t) / 1e3)
    return clock


def plot(results: dict | str | Path, png: str | Path) -> Path:
    """Validation loss against step and against training wall-clock time, one row per T."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = _load(results)
    runs = [r for r in results["runs"] if r.get("eval")]
    seqlens = sorted({r["T"] for r in runs}) or [None]
    colours = {v: plt.get_cmap("tab10")(i) for i, v in enumerate(VARIANTS)}
    fig, axes = plt.subplots(len(seqlens), 2, figsize=(11, 3.8 * len(seqlens)), squeeze=False)
    for row, T in zip(axes, seqlens, strict=True):
        for r in (r for r in runs if r["T"] == T):
            clock = steady_clock(r, results["meta"]["settings"]["speed_skip"])
            steps, loss = zip(*((e["step"], e["val_loss"]) for e in r["eval"]), strict=True)
            seconds = [clock[s] for s in steps]
            shared = r.get("protocol") == "shared-qk"
            style = dict(marker="o", markersize=2.5, color=None if shared else colours.get(r["variant"]), label=_label(r),
                         linestyle="--" if shared else "-")  # fmt: skip
            row[0].plot(steps, loss, **style)
            row[1].plot(seconds, loss, **style)
        xlabels = ("step", "training time, s (evaluation and compilation excluded)")
        for ax, xlabel in zip(row, xlabels, strict=True):
            ax.set_xlabel(xlabel)
            ax.set_ylabel("validation loss (nats / byte)")
            ax.set_title(f"T={T}", fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    meta = results["meta"]
    m = meta["model"]
    fig.suptitle(
        f"byte-level LM on the stdlib: {m['layers']} layers, width {m['width']}, {m['heads']} heads"
        f"{', shared QK' if m.get('shared_qk') else ''}; {meta['device_name']}",
        fontsize=10,
    )
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


# ---------------------------------------------------------------------------------------------
# Command line

SMOKE = dict(layers=2, width=64, heads=2, t="256", batch=2, steps=6, eval_every=3, val_tokens=512, warmup=2,
             lr=3e-3, max_files=200, speed_skip=1, variants="standard:dense,hash16,dense-noself,hash16-noself")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--smoke", action="store_true", help="CPU smoke test: " + ", ".join(f"{k}={v}" for k, v in SMOKE.items()))
    p.add_argument("--plot", metavar="RESULTS_JSON", help="draw RESULTS_JSON's loss curves (next to it, .png) and stop")
    p.add_argument("--report", metavar="RESULTS_JSON", help="print RESULTS_JSON's table for the README and stop")
    p.add_argument("--protocols", default="standard,shared-qk", help="comma-separated (default: %(default)s)")
    p.add_argument("--variants", default=None, help="comma-separated, a name or protocol:name (default: every variant of each protocol)")
    p.add_argument("--t", default="8192,16384", help="sequence lengths, comma-separated (default: %(default)s)")
    p.add_argument("--steps", type=int, default=300, help="training steps per run (default: %(default)s)")
    p.add_argument("--batch", type=int, default=None, help="windows per step (default: --tokens-per-step / T, at least 1)")
    p.add_argument("--tokens-per-step", type=int, default=16384, help="sets the batch when --batch is not given")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--shared-qk", action="store_true", help="only the shared-qk protocol (as --protocols shared-qk)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--warmup", type=int, default=30, help="warm-up steps of the learning rate")
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--val-tokens", type=int, default=65536, help="validation tokens per evaluation (whole windows)")
    p.add_argument("--speed-skip", type=int, default=5, help="first steps left out of the speed numbers")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", default="auto", help="tilesparse backend (default: auto: sdpa/triton on CUDA)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="compile the op with cuda_graphs=True: its calls replayed from CUDA graphs")
    p.add_argument("--device", help="cuda or cpu (default: cuda when available)")
    p.add_argument("--max-files", type=int, default=None, help="use this many stdlib files (default: all)")
    p.add_argument("--time-budget-s", type=float, default=None,
                   help="stop the runs cleanly after this long in all (runs share what is left)")  # fmt: skip
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "benchmarks" / "results"),
                   help="output folder (default: benchmarks/results)")  # fmt: skip
    p.add_argument("--name", default="train_lm", help="file name of the JSON and PNG (default: %(default)s)")
    args = p.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
        args.device = args.device or "cpu"
    if args.shared_qk:
        args.protocols = "shared-qk"
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        print(plot(args.plot, Path(args.plot).with_suffix(".png")))
        return 0
    if args.report:
        print(report(args.report))
        if any("protocol" in r for r in _load(args.report)["runs"]):
            print(protocol_report(args.report))
        return 0
    results = run(args)
    return 1 if any(r.get("error") for r in results["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
