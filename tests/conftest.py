"""CPU test configuration: Triton's interpreter on, and one hypothesis profile for CI.

The interpreter flag must be set before any ``@triton.jit`` decorator runs, so it comes
first. The profile drops hypothesis's deadline (the tile executor's Python loops make example
times vary with machine load); each test sets its own ``max_examples``. A run under the
interpreter stops at once, saying what to install, when the installed numpy breaks the
installed Triton's interpreter (versions.INTERPRETER_NUMPY_2_4) rather than failing test by test.
The files that take minutes are collected first, longest first (``pytest_collection_modifyitems``):
``make test`` hands whole files to its two workers in collection order (``--dist loadfile
--no-loadscope-reorder``), so neither worker is left running one of them while the other waits.
"""

import os
from pathlib import Path

# setdefault: the GPU tests (tests/gpu, on the device) run with TRITON_INTERPRET=0
os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    if os.environ["TRITON_INTERPRET"] in ("", "0"):
        return
    import numpy as np

    from tilesparse.backends.triton.versions import INTERPRETER_NUMPY_2_4, installed_triton, release

    if release(np.__version__) >= (2, 4) and INTERPRETER_NUMPY_2_4.affects():
        major, minor = installed_triton()
        raise pytest.UsageError(
            f"Triton {major}.{minor} with numpy {np.__version__}: {INTERPRETER_NUMPY_2_4.what}; "
            "install 'numpy<2.4' (make test TRITON=triton==3.6.0 does) or a newer Triton"
        )


# the CPU suite's longest files, longest first (seconds on a 2-core machine, each beside the other
# worker's load: the sm_90 compile of the bf16 kernel variants and the index kernels ~200-270
# cold where the kernels changed since tests/backends/triton/sm90_reports.json was written, under
# a second otherwise; the random-pattern property test ~80 (20 examples), the rest 30-80); xdist's
# own order (most tests first) started the one-test property file last, and one worker ran it
# alone for four minutes
SLOW_FILES = (
    "tests/backends/triton/test_compile_sm90.py",
    "tests/backends/triton/test_triton_random_patterns.py",
    "tests/backends/triton/test_triton_interpreter.py",
    "tests/test_shorter_queries.py",
    "tests/test_torch_integration.py",
    "tests/backends/triton/test_compile_gluon_sm90.py",
    "tests/test_examples.py",
    "tests/test_padding.py",
)
_ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config, items):
    rank = {_ROOT / name: i for i, name in enumerate(SLOW_FILES)}
    # stable: every file keeps its tests' order, the others their collection order
    items.sort(key=lambda item: rank.get(item.path.resolve(), len(SLOW_FILES)))
