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
