"""Where a checked call's extra host time goes (#12: given ids checked on the device cost 100-190 µs
of host time a forward more than trusted ones in run 212b, where the CPU with launches stubbed
shows about 35): per row, the host time from an idle GPU (median of --calls) of a forward with
trusted decisions, with the same decisions as a user's own tensors (checked), and checked with
one part of the check taken out at a time, in one process, every variant once a round, rounds
alternating the order:

- ``no-publish``: the error record's copy to pinned host memory and its event not made
  (``DeviceErrors.publish`` a no-op; ``poll`` then has nothing to wait for);
- ``no-launch``: the id check's launch and its three allocations gone (the bound check hands
  back the given ids and a kept poison of 1);
- ``no-device``: both (what is left: the layout key, the structural checks, the trust stamp).

The variants with a part taken out return the right output only for in-range ids (they are
diagnostics, not call paths). Usage:

    python3 benchmarks/results/logs/checked_host.py OUT.json [--shapes 1x16x16x64x4096] [--patterns hash16,topk8]
"""
import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
import call_times  # noqa: E402
from tilesparse.backends.triton import idcheck  # noqa: E402
from tilesparse.bench.timing import host_us  # noqa: E402
from tilesparse.patterns import decision_errors  # noqa: E402

VARIANTS = ("trusted", "checked", "no-publish", "no-launch", "no-device")


@contextlib.contextmanager
def without(publish: bool, launch: bool):
    """The check with its publish and/or its launch taken out (see the module docstring)."""
    real_publish, real_call = decision_errors.DeviceErrors.publish, idcheck.BoundIdCheck.__call__
    ones: dict = {}

    def no_launch(self, ids):
        if self.device not in ones:
            ones[self.device] = torch.ones((), dtype=torch.float32, device=self.device)
        return list(ids), ones[self.device]

    if publish:
        decision_errors.DeviceErrors.publish = lambda self: None
    if launch:
        idcheck.BoundIdCheck.__call__ = no_launch
    try:
        yield
    finally:
        decision_errors.DeviceErrors.publish, idcheck.BoundIdCheck.__call__ = real_publish, real_call


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--shapes", default="1x16x16x64x4096,1x32x8x128x4096")
    ap.add_argument("--patterns", default="hash16,topk8,topk8@auto")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cpu":  # a smoke run: the device path of the checks, counted on the CPU
        decision_errors.DEFERRED_DEVICES = frozenset({"cuda", "cpu"})
    parts = {"trusted": (False, False), "checked": (False, False), "no-publish": (True, False),
             "no-launch": (False, True), "no-device": (True, True)}  # fmt: skip
    report = {"argv": sys.argv[1:], "torch": torch.__version__, "unit": "us of host time a forward, median",
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "rows": {}}  # fmt: skip
    for shape in args.shapes.split(","):
        B, H, Hkv, D, T = (int(x) for x in shape.split("x"))
        g = torch.Generator(device=device).manual_seed(0)
        q = torch.randn(B, H, T, D, device=device, dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, T, D, device=device, dtype=torch.bfloat16, generator=g) for _ in range(2))
        for name in args.patterns.split(","):
            attn = call_times.compiled(name)
            dec = attn.decide(q, k)
            given = type(dec)(**{n: t.clone() for n, t in dec.items() if t is not None})
            want = attn(q, k, v, decisions=dec)
            times: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for r in range(args.rounds):
                for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                    decisions = dec if variant == "trusted" else given
                    with without(*parts[variant]):
                        out = attn(q, k, v, decisions=decisions)
                        assert torch.equal(out, want), (shape, name, variant)
                        times[variant].append(host_us(lambda: attn(q, k, v, decisions=decisions), device, args.calls,
                                                      stat="median"))  # fmt: skip
            row = {v: round(statistics.median(t), 1) for v, t in times.items()}
            report["rows"][f"{shape}/{name}"] = row
            print(shape, name, row, flush=True)
            decision_errors.check_errors()
    args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
