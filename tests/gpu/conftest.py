"""GPU tests: run on the device (an H200), never in CI. Every test here is marked ``gpu``."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/gpu/" in str(item.fspath):
            item.add_marker(pytest.mark.gpu)


@pytest.fixture(scope="session", autouse=True)
def _need_cuda():
    if not torch.cuda.is_available():
        pytest.fail("tests/gpu needs a CUDA GPU; run them on the device (make test-gpu), not in CI")


@pytest.fixture
def gluon_runs_here():
    """Skip where the Gluon kernels (gluon_dkdv.py, gluon_dq.py, gluon_fwd.py) cannot run: they are written for
    Hopper and the Triton releases in GLUON_TRITON. There the backend launches the Triton kernels,
    which test_triton_gpu.py covers; on the H200 with Triton 3.6 these tests run."""
    from tilesparse.backends.triton.gluon_dkdv import GLUON_TRITON
    from tilesparse.backends.triton.versions import installed_triton

    if torch.cuda.get_device_capability() != (9, 0) or installed_triton() not in GLUON_TRITON:
        pytest.skip(f"the kernel runs on Hopper with a Triton in {sorted(GLUON_TRITON)} only")
