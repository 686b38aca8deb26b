"""Host time of one kernel launch, by path (#12: where a launch's 12-17 us go).

A trivial Triton kernel (nothing stored) with few or many runtime arguments (4: two pointers, two
ints; 44: twenty-two of each, as an attention kernel takes), launched through:

- ``lean``: ``launch.lean(k)[grid](...)``, this library's path (its key, then Triton's launcher);
- ``run``: the compiled kernel's ``run`` (Triton's ``CudaLauncher.__call__``: its scratch
  allocations in Python, then the C launcher), arguments already prepared;
- ``c``: Triton's C launcher itself (``CudaLauncher.launch``), every argument prepared;
- ``ctypes``: ``cuLaunchKernel`` from libcuda through ctypes, the parameter array built once and
  the pointers' values set per launch;
- ``torch``: ``torch.Tensor.zero_`` of a 1-element tensor (torch's own C++ launch, for scale).

Per path: us per launch back to back (mean of 2,000 launches, median of 5 blocks) and from an
idle GPU (synchronize, then time one launch; median of 300). Prints a table, writes JSON.

    python3 benchmarks/results/logs/launch_costs.py OUT.json
"""

import ctypes
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from tilesparse.backends.triton import launch as L

SRC = '''
import triton
import triton.language as tl


@triton.jit
def k4(A, B, n, m, FLAG: tl.constexpr):
    if tl.program_id(0) < 0:
        tl.store(A + n, tl.load(B + m))


@triton.jit
def k44({ptrs}, {ints}, FLAG: tl.constexpr):
    if tl.program_id(0) < 0:
        tl.store(P0 + i0, tl.load(P21 + i21))
'''


def load_kernels():
    ptrs = ", ".join(f"P{i}" for i in range(22))
    ints = ", ".join(f"i{i}" for i in range(22))
    path = Path(tempfile.mkdtemp()) / "launch_cost_kernels.py"
    path.write_text(SRC.format(ptrs=ptrs, ints=ints))
    spec = importlib.util.spec_from_file_location("launch_cost_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.k4, mod.k44


def per_launch(fn, n=2000, blocks=5) -> tuple[float, float]:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    means = []
    for _ in range(blocks):
        t = time.perf_counter_ns()
        for _ in range(n):
            fn()
        means.append((time.perf_counter_ns() - t) / n / 1e3)
        torch.cuda.synchronize()
    idle = []
    for _ in range(300):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        fn()
        idle.append((time.perf_counter_ns() - t) / 1e3)
    return round(statistics.median(means), 2), round(statistics.median(idle), 2)


def main() -> None:
    out = Path(sys.argv[1])
    k4, k44 = load_kernels()
    dev = torch.device("cuda")
    bufs = [torch.zeros(64, device=dev) for _ in range(22)]
    stream = torch.cuda.current_stream().cuda_stream
    libcuda = ctypes.CDLL("libcuda.so.1")
    cu_launch = libcuda.cuLaunchKernel
    cu_launch.restype = ctypes.c_int
    cu_launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    rows = {}
    cases = {
        "4": (k4, (bufs[0], bufs[1], 3, 5)),
        "44": (k44, tuple(bufs) + tuple(range(3, 25))),
    }
    grid = (8, 1, 1)
    for name, (kern, args) in cases.items():
        lk = L.lean(kern)
        lk[grid](*args, FLAG=True, num_warps=4)  # compile (a miss)
        lk[grid](*args, FLAG=True, num_warps=4)
        (_, function, _, tail), = lk.cache.values()  # (go, function, head, tail): launch.launch_entry
        compiled = kern[grid](*args, FLAG=True, num_warps=4, **L.OPTIONS)  # Triton's own launch: its cached kernel
        run, metadata = compiled.run, compiled.packed_metadata
        _, run_args = L.prepared(args)
        paths = {
            "lean": lambda lk=lk, args=args: lk[grid](*args, FLAG=True, num_warps=4),
            "run": lambda: run(8, 1, 1, stream, function, metadata, None, None, None, *run_args, *tail),
        }
        c_launch = getattr(run, "launch", None)
        if c_launch is not None:
            coop, pdl = run.launch_cooperative_grid, run.launch_pdl
            paths["c"] = lambda: c_launch(8, 1, 1, stream, function, coop, pdl, None, None, metadata, None, None, None,
                                          *run_args, *tail)
        # ctypes: the kernel's runtime parameters (FLAG is a constexpr, gone), then Triton's two scratch pointers
        n_ptr = sum(isinstance(a, torch.Tensor) for a in args)
        values = [ctypes.c_uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else ctypes.c_int32(a) for a in args]
        values += [ctypes.c_uint64(0), ctypes.c_uint64(0)]
        params = (ctypes.c_void_p * len(values))(*[ctypes.addressof(v) for v in values])
        num_warps, _, shared = metadata

        def by_ctypes(values=values, params=params, args=args, n_ptr=n_ptr, num_warps=num_warps, shared=shared):
            for v, a in zip(values[:n_ptr], args[:n_ptr]):
                v.value = a.data_ptr()
            rc = cu_launch(function, 8, 1, 1, 32 * num_warps, 1, 1, shared, stream, params, None)
            if rc:
                raise RuntimeError(f"cuLaunchKernel: {rc}")

        paths["ctypes"] = by_ctypes
        one = torch.zeros(1, device=dev)
        paths["torch"] = one.zero_
        for p, fn in paths.items():
            rows[f"{name} args/{p}"] = per_launch(fn)
            print(f"{name} args/{p}", rows[f"{name} args/{p}"], flush=True)
    meta = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
            "triton": __import__("triton").__version__,
            "unit": "[us per launch back to back (median of 5 blocks of 2,000), us from an idle GPU (median of 300)]"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"{'path':<16}{'b2b us':>10}{'idle us':>10}")
    for k, (b, i) in rows.items():
        print(f"{k:<16}{b:>10}{i:>10}")


if __name__ == "__main__":
    main()
