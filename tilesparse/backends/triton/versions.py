"""The defects of Triton releases that the backend or its tests work around, by release.

A :class:`Defect` lists the (major, minor) releases measured to have it and those measured
without it; :meth:`Defect.affects` answers for any release, and every workaround asks it, so the
version check lives here only. A release that was not measured is taken to behave like the
nearest measured one below it (a defect stays until a release fixes it; below every measured
release, it is assumed present): each workaround is exact where it is not needed, only slower.

Each defect has a test that measures the installed Triton and fails when this table disagrees
(a release that fixes one fails there until it is recorded as fixed):

- :data:`INTERPRETER_BF16_DOT`: tests/backends/triton/test_triton_interpreter.py
- :data:`CARRIED_SCALAR_FOLDED`: tests/backends/triton/test_triton_versions.py (compiles a
  reproducer for sm_90)
- :data:`INTERPRETER_NUMPY_2_4`: tests/backends/triton/test_triton_versions.py (runs a loop with a
  runtime bound in the interpreter on the installed numpy)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CARRIED_SCALAR_FOLDED",
    "INTERPRETER_BF16_DOT",
    "INTERPRETER_NUMPY_2_4",
    "Defect",
    "installed_triton",
    "nearest_measured",
    "release",
]


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as ``"3.7.1"`` or ``"3.10.0+git1234"``."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def installed_triton() -> tuple[int, int]:
    """(major, minor) of the installed Triton."""
    import triton

    return release(triton.__version__)


@dataclass(frozen=True)
class Defect:
    """A defect of some Triton releases, and what works around it."""

    what: str
    workaround: str
    broken: frozenset[tuple[int, int]]
    fixed: frozenset[tuple[int, int]] = frozenset()

    def affects(self, version: str | tuple[int, int] | None = None) -> bool:
        """Whether Triton ``version`` (default: the installed one) has this defect."""
        v = installed_triton() if version is None else release(version) if isinstance(version, str) else version
        nearest = nearest_measured(v, self.broken | self.fixed)
        return nearest is None or nearest in self.broken


def nearest_measured(version: tuple[int, int], measured) -> tuple[int, int] | None:
    """The release among ``measured`` that ``version`` is taken to behave like: the nearest one
    at or below it (None when every measured release is newer)."""
    below = [m for m in measured if m <= version]
    return max(below) if below else None


# measured with a 16x16 bf16 dot in the interpreter on 3.6.0, 3.7.1 and 3.9.0
INTERPRETER_BF16_DOT = Defect(
    what="the CPU interpreter multiplies the bf16 operands of tl.dot as raw bit patterns (errors ~1e10; "
    "triton-lang/triton#11584)",
    workaround="interpreter.patch_bf16_dot converts bf16 dot operands to fp32 under TRITON_INTERPRET=1",
    broken=frozenset({(3, 6), (3, 7), (3, 9)}),
)

# measured with tests/backends/triton/carried_scalar_probe.py on 3.6.0, 3.7.1, 3.8.0 and 3.9.0
CARRIED_SCALAR_FOLDED = Defect(
    what="compiling for a GPU, a pass after the TTIR (the TTGIR layout passes) replaces a scalar carried "
    "through a loop that holds tile loops with its initial value",
    workaround="on these releases kernels._tiles reads the previous segment's end back from memory instead "
    "of carrying it through the segment loop (kernels.CARRY_PREV_HI)",
    broken=frozenset({(3, 6), (3, 7)}),
    fixed=frozenset({(3, 8), (3, 9)}),
)

# measured with numpy 2.4.6: 3.6.0 fails, the CPU suite runs on 3.7.1 and 3.9.0
INTERPRETER_NUMPY_2_4 = Defect(
    what="with numpy >= 2.4 the CPU interpreter fails on any loop with a runtime bound "
    "(TypeError: only 0-dimensional arrays can be converted to Python scalars)",
    workaround="the test setup installs numpy<2.4 with these releases (Makefile); tests/conftest.py "
    "stops with that instruction otherwise",
    broken=frozenset({(3, 6)}),
    fixed=frozenset({(3, 7), (3, 9)}),
)
