"""Process-wide switches that a context manager turns on for the length of a block (tests,
benchmarks): a one-element list read where the switch matters, at no more cost than an index."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["switched_on"]


@contextlib.contextmanager
def switched_on(switch: list[bool]) -> Iterator[None]:
    """``switch[0]`` is True inside the block and as it was before after it."""
    old = switch[0]
    switch[0] = True
    try:
        yield
    finally:
        switch[0] = old
