"""CPU test configuration: Triton's interpreter on, and one hypothesis profile for CI.

The interpreter flag must be set before any ``@triton.jit`` decorator runs, so it comes
first. The profile drops hypothesis's deadline (the tile executor's Python loops make example
times vary with machine load); each test sets its own ``max_examples``. A run under the
interpreter stops at once, saying what to install, when the installed numpy breaks the
installed Triton's interpreter (versions.INTERPRETER_NUMPY_2_4) rather than failing test by test.
"""

import os

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
