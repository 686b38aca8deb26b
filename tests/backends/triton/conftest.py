"""Fixtures of the sm_90 compile tests (test_compile_sm90.py, test_compile_gluon_sm90.py)."""

import pytest


@pytest.fixture(scope="module")
def selected_params(request) -> list[dict]:
    """The parameters of this session's selected tests in the requesting module: what its
    module-scoped compile fixture builds (CI deselects the variants marked slow)."""
    items = request.session.items
    return [i.callspec.params for i in items if i.module is request.module and hasattr(i, "callspec")]
