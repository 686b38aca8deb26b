"""CPU test configuration: Triton's interpreter on, and one hypothesis profile for CI.

The interpreter flag must be set before any ``@triton.jit`` decorator runs, so it comes
first. The profile drops hypothesis's deadline (the tile executor's Python loops make example
times vary with machine load); each test sets its own ``max_examples``.
"""

import os

# setdefault: the GPU tests (tests/gpu, on the device) run with TRITON_INTERPRET=0
os.environ.setdefault("TRITON_INTERPRET", "1")

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
