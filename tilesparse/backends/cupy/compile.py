"""Kernel sources, the compile options (this module is the one place they live), and the
sm_90 compile check CI runs without a GPU.

On a GPU, :func:`module` compiles a ``.cu`` file through ``cupy.RawModule`` (NVRTC) with the
template instances one launch needs, cached per (file, instances). Without a GPU,
:func:`compile_check` builds every instance CI cares about for sm_90: with ``nvcc -cubin``
when it is on PATH (its ``ptxas -v`` report gives registers, spills and stack per kernel),
else with NVRTC through ``cupy.cuda.nvrtc`` (``pip install 'nvidia-cuda-nvrtc==13.0.*'``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ARCH",
    "KERNEL_DIR",
    "NVRTC_OPTIONS",
    "SHARED_LIMIT",
    "CompileReport",
    "Module",
    "check_instances",
    "compile_check",
    "compiler_available",
    "module",
    "source",
    "source_file",
]

KERNEL_DIR = Path(__file__).parent / "kernels"
# NVRTC options for every module; cupy adds -arch for the device it compiles for
NVRTC_OPTIONS: tuple[str, ...] = ("-std=c++17",)
ARCH = "sm_90"  # the H200's; what the CI check compiles for
SHARED_LIMIT = 232_448  # bytes of shared memory one block may opt in to on sm_90

# template instances the CI check compiles: every dtype at the head dims the benchmark uses
DTYPE_TAGS = ("F32", "F16", "BF16")
check_instances: dict[str, tuple[str, ...]] = {
    "sfa.cu": tuple(
        [f"sfa_compress_keys<{t}>" for t in DTYPE_TAGS]
        + [f"{k}<{t}, {d}>" for k in ("sfa_fwd", "sfa_bwd_dq", "sfa_bwd_dkdv") for t in DTYPE_TAGS for d in (64, 128, 256)]
    ),
    "index.cu": ("index_count<F32>", "index_count<F16>", "index_count<BF16>", "index_scatter"),
}


COMMON = "common.cuh"  # element types and constants every source shares, put in front of each


def source(name: str) -> str:
    """The text to compile for ``kernels/<name>``: ``common.cuh`` followed by the file (one
    text, so neither NVRTC nor nvcc needs an include path)."""
    return source_file(COMMON) + f'#line 1 "{name}"\n' + source_file(name)


def source_file(name: str) -> str:
    """The text of ``kernels/<name>`` alone."""
    return (KERNEL_DIR / name).read_text()


@functools.lru_cache(maxsize=None)
def module(name: str, instances: tuple[str, ...]) -> Module:
    """The kernels of ``kernels/<name>`` with the template ``instances`` (name expressions such
    as ``"sfa_fwd<BF16, 128>"``), compiled for the current device; ``get_function(instance)``.

    NVRTC through ``cupy.RawModule`` first; when that fails (no libnvrtc found, say) and nvcc
    is on PATH, each instance is built with ``nvcc -cubin`` and loaded from the file.
    ``TILESPARSE_CUPY_COMPILER=nvcc`` (or ``nvrtc``) forces one of the two."""
    return Module(name, instances)


class Module:
    """Compiled kernels of one source file, by name expression."""

    def __init__(self, name: str, instances: tuple[str, ...]):
        import cupy

        self.name, self.instances = name, instances
        self._raw = None
        self._kernels: dict[str, object] = {}
        self._tmp: tempfile.TemporaryDirectory | None = None
        forced = os.environ.get("TILESPARSE_CUPY_COMPILER", "")
        if forced != "nvcc":
            try:
                raw = cupy.RawModule(code=source(name), options=NVRTC_OPTIONS, name_expressions=list(instances))
                raw.get_function(instances[0])  # compiles now, so a failure shows here
                self._raw = raw
                self.compiler = "nvrtc"
                return
            except Exception as e:  # noqa: BLE001 - fall back to nvcc below, or report both
                if forced == "nvrtc" or not shutil.which("nvcc"):
                    raise RuntimeError(f"compiling {name} with NVRTC failed and nvcc is not on PATH: {e}") from e
        self.compiler = "nvcc"
        self._tmp = tempfile.TemporaryDirectory(prefix="tilesparse-cubin-")

    def get_function(self, instance: str):
        """The ``cupy.RawKernel`` of ``instance``."""
        if self._raw is not None:
            return self._raw.get_function(instance)
        if instance not in self._kernels:
            self._kernels[instance] = self._nvcc_kernel(instance)
        return self._kernels[instance]

    def _nvcc_kernel(self, instance: str):
        import cupy

        major, minor = cupy.cuda.Device().compute_capability[:-1], cupy.cuda.Device().compute_capability[-1]
        arch = f"sm_{major}{minor}"
        out = Path(self._tmp.name) / f"{len(self._kernels)}.cubin"
        report = _nvcc(self.name, (instance,), arch, cubin=out)
        return cupy.RawModule(path=str(out)).get_function(entry_name(report, instance))


def entry_name(report: CompileReport, instance: str) -> str:
    """The mangled entry of ``instance`` in a report that compiled it alone: the one entry
    named after its kernel (non-template kernels of the file are emitted too)."""
    base = instance.split("<")[0].strip()
    names = [n for n in report.registers if n.startswith(f"_Z{len(base)}{base}")]
    if len(names) != 1:
        raise RuntimeError(f"expected one entry for {instance} in {sorted(report.registers)}")
    return names[0]


@dataclass(frozen=True)
class CompileReport:
    """What compiling one ``.cu`` file for sm_90 said: the compiler used and, with nvcc, per
    kernel entry (mangled name) its registers, spill bytes (stores + loads) and stack frame."""

    file: str
    compiler: str
    registers: dict[str, int]
    spills: dict[str, int]
    stack: dict[str, int]
    log: str


def compiler_available() -> str | None:
    """"nvcc" or "nvrtc" (whichever the check would use), or None with neither."""
    if shutil.which("nvcc"):
        return "nvcc"
    try:
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
        return "nvrtc"
    except Exception:  # noqa: BLE001 - any failure to load libnvrtc means "not available"
        return None


def compile_check(name: str, instances: tuple[str, ...] | None = None, arch: str = ARCH) -> CompileReport:
    """Compile ``kernels/<name>`` with ``instances`` for ``arch``; raise RuntimeError with the
    compiler's log on any error."""
    instances = check_instances[name] if instances is None else instances
    how = compiler_available()
    if how == "nvcc":
        return _nvcc(name, instances, arch)
    if how == "nvrtc":
        return _nvrtc(name, instances, arch)
    raise RuntimeError("neither nvcc nor NVRTC is available: pip install 'nvidia-cuda-nvrtc==13.0.*'")


def _nvcc(name: str, instances: tuple[str, ...], arch: str, cubin: Path | None = None) -> CompileReport:
    # taking each instance's address makes the front end instantiate it, as a launch would
    refs = ",\n".join(f"    (void*)&{e}" for e in instances)
    text = f"{source(name)}\n__attribute__((used)) static void* const tilesparse_instances[] = {{\n{refs}\n}};\n"
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "check.cu"
        src.write_text(text)
        cmd = ["nvcc", f"-arch={arch}", *NVRTC_OPTIONS, "-cubin", "-Xptxas", "-v", "-diag-suppress", "177",
               "-o", str(cubin or Path(tmp) / "check.cubin"), str(src)]  # fmt: skip
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    log = res.stdout + res.stderr
    if res.returncode != 0:
        raise RuntimeError(f"nvcc failed on {name}:\n{log}")
    registers, spills, stack = {}, {}, {}
    current = None
    for line in log.splitlines():
        if m := re.search(r"Compiling entry function '([^']+)'", line):
            current = m.group(1)
        elif m := re.search(r"Function properties for (\S+)", line):
            current = m.group(1) if m.group(1) == current else None  # a non-inlined device function: not reported
        elif current and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)):
            stack[current] = int(m.group(1))
            spills[current] = int(m.group(2)) + int(m.group(3))
        elif current and (m := re.search(r"Used (\d+) registers", line)):
            registers[current] = int(m.group(1))
    return CompileReport(name, "nvcc", registers, spills, stack, log)


def _nvrtc(name: str, instances: tuple[str, ...], arch: str) -> CompileReport:
    from cupy.cuda import nvrtc

    prog = nvrtc.createProgram(source(name), name, [], [])
    try:
        for e in instances:
            nvrtc.addNameExpression(prog, e)
        try:
            nvrtc.compileProgram(prog, [f"-arch={arch}", *NVRTC_OPTIONS])
        except nvrtc.NVRTCError as e:
            raise RuntimeError(f"NVRTC failed on {name}: {e}\n{nvrtc.getProgramLog(prog)}") from None
        log = nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)
    return CompileReport(name, "nvrtc", {}, {}, {}, log)
