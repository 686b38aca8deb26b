#!/bin/bash
# #12: where an eager call's backward host time goes, and what autograd's worker thread costs
# (diag_eager_bwd.py, both model shapes); then a cProfile of eager forward calls with decisions
# made in the call (Hash(16), the hybrid), B=1 H=32 Hkv=8 D=128 T=4,096.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for s in 1,16,16,64,4096 1,32,8,128,4096; do
  python3 benchmarks/results/logs/diag_eager_bwd.py $s $R/diag_eager_bwd_${s//,/x}_run144_h200.json 2>&1 | tail -20
done | tee $R/diag_eager_bwd_run144.log
python3 - <<'PY' 2>&1 | tee $R/profile_decide_run144.log
import cProfile, io, pstats, time, torch
import tilesparse as ts
B, H, Hkv, D, T = 1, 32, 8, 128, 4096
q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
k, v = (torch.randn(B, Hkv, T, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
for name, spec in (("hash16", ts.Hash(buckets=16)), ("hybrid", ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]))):
    attn = ts.compile(spec, causal=True, backend="triton")
    dec = attn.decide(q, k)
    for label, f in (("given", lambda: attn(q, k, v, decisions=dec)), ("made", lambda: attn(q, k, v)), ("decide", lambda: attn.decide(q, k))):
        for _ in range(20): f()
        host = []
        for _ in range(200):
            torch.cuda.synchronize(); t = time.perf_counter(); f(); host.append((time.perf_counter() - t) * 1e6)
        print(name, label, "fwd host median %.0f us" % sorted(host)[100])
    pr = cProfile.Profile()
    for _ in range(300):
        torch.cuda.synchronize(); pr.enable(); attn(q, k, v); pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(40)
    print(f"==== {name} forward, decisions made, by tottime\n" + s.getvalue())
PY
