"""Communication volume of sequence-parallel sparse attention, per rank, forward+backward.

    python benchmarks/comm_volume.py            # the table of docs/sequence_parallel.md

Arithmetic only (no devices): bytes one rank sends in one forward+backward call, B=1, H=32,
Hkv=8, D=128, bf16, T=1,048,576, on 8 and 64 ranks, for each scheme that fits the pattern.
The formulas are in docs/sequence_parallel.md; each function below is one of them.
"""

from __future__ import annotations

T, H, HKV, D, ELEM = 1 << 20, 32, 8, 128, 2
A = D * ELEM  # bytes of one head of one token
G = H // HKV


def ulysses(P: int, fq=1.0, fkv=1.0, fo=1.0, fv=None) -> float:
    """Head-parallel all-to-all (built with every f = 1): q, k, v in and the output back, their
    gradients the other way; a fraction f of each is sent when shards compact before sending.
    kv heads are copied c = P*n/Hkv times when Hkv < P."""
    assert H % P == 0
    s, local = T // P, H // P
    n = local // G if local % G == 0 else (1 if G % local == 0 else local)
    c = P * n / HKV
    fv = fkv if fv is None else fv
    return 2 * (P - 1) / P * s * A * (fq * H + (fkv + fv) * c * HKV + fo * H)


def ring(P: int, fkv=1.0, heads=HKV) -> float:
    """K/V ring (queries stay): P-1 shards of K, V in the forward; K, V and dK, dV in the backward."""
    return 3 * (P - 1) * (T // P) * 2 * heads * A * fkv


def ulysses_ring(P: int, fq=1.0, fkv_head=1.0, fo=1.0) -> float:
    """P > H: Ulysses over H ranks (one query head each), a ring over the R = P/H sequence groups
    for that head's one kv head (sending a fraction fkv_head of its keys)."""
    R = P // H
    s = T // P
    # the Ulysses part inside a group of H ranks holding s tokens each: one query head and its kv head per rank
    u = 2 * (H - 1) / H * s * A * (fq * H + 2 * fkv_head * H + fo * H)
    r = 3 * (R - 1) * (T // R) * 2 * A * fkv_head
    return u + r


def bucket_route(P: int, fq=1.0, fkv=1.0, fo=1.0) -> float:
    """Hash, P <= H * buckets: each (query head, bucket range) owned by one rank; every token's q
    goes to the owner of its bucket, every key and value to the owner of its bucket for each of
    the G query heads sharing its kv head (at most G copies: the bound used), outputs come back."""
    s = T // P
    return 2 * (P - 1) / P * s * A * (fq * H + 2 * fkv * G * HKV + fo * H)


def table() -> list[tuple[str, str, str, float, float]]:
    keep = 0.5
    u_group = 1 - (1 - keep) ** G  # a key kept by at least one of the G query heads of its kv head
    topk_q = 8 * (ELEM + 1) / A  # TopKFeatures(8): 8 values and 8 one-byte ids instead of D values
    rows = [
        ("any", "Ulysses all-to-all (built)", "built", ulysses(8), None),
        ("any", "dense K/V ring", "paper", ring(8), ring(64)),
        ("Dense", "Ulysses x ring (P > H)", "paper", None, ulysses_ring(64)),
        ("QKDrop(0.5)", "Ulysses, shards compacted before sending", "paper",
         ulysses(8, fq=keep, fkv=u_group, fo=keep), None),
        ("QKDrop(0.5)", "kept-key ring", "paper", ring(8, fkv=u_group), ring(64, fkv=u_group)),
        ("QKDrop(0.5)", "Ulysses x kept-key ring (P > H)", "paper", None,
         ulysses_ring(64, fq=keep, fkv_head=keep, fo=keep)),
        ("Hash(16)", "bucket routing (P <= H x 16)", "paper", bucket_route(8), bucket_route(64)),
        ("Hash(16) + QKDrop(0.5)", "bucket routing of kept tokens", "paper",
         bucket_route(8, fq=keep, fkv=keep, fo=keep), bucket_route(64, fq=keep, fkv=keep, fo=keep)),
        ("TopKFeatures(8)", "Ulysses, q~ and k~ compressed", "paper",
         ulysses(8, fq=topk_q, fkv=G * topk_q, fv=1.0), None),
    ]  # fmt: skip
    return rows


def main() -> None:
    print("| pattern | scheme | status | 8 GPUs, GB/rank | 64 GPUs, GB/rank |")
    print("| --- | --- | --- | ---: | ---: |")
    for pattern, scheme, status, p8, p64 in table():
        show = [f"{x / 1e9:.2f}" if x is not None else "n/a" for x in (p8, p64)]
        print(f"| {pattern} | {scheme} | {status} | {show[0]} | {show[1]} |")


if __name__ == "__main__":
    main()
