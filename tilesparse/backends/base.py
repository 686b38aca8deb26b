"""What every attention backend is: capabilities as class attributes, ``not_supported_reasons``
as the single source of truth, and ``attend`` over one prepared head group.

An attention backend turns a group's index tensors (built by an index builder,
``builder.py``) into the output and its gradients. It names the stages it runs itself
(``STAGES``: ``attend`` always; ``gather`` and ``scatter`` when its kernels read and write
rows through the layout's order) and the chains of them it runs as one kernel (``FUSIONS``);
the planner contracts each chain into one node of the stage graph and records it as a fusion.
``INDEX_BUILDER`` names its own builder: the one a forced backend gets, and the one whose
reasons are the backend's too (it runs only where its own builder can build). Its price comes
from the cost model's entry under its ``NAME`` (planner/costs.json), so a new backend plugs in
with a registration and a calibrated entry.

Backends depend on the IR only; the planner reaches them through :data:`REGISTRY`.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor

from ..ir import AttentionInputs, HeadGroup, PreparedGroup
from ..ir.prepare import head_index

__all__ = ["REGISTRY", "Backend", "register", "select_heads"]


class Backend(ABC):
    """A way to run the attend stage of a head group on its index tensors.

    Subclasses set the class attributes and implement :meth:`attend` (and :meth:`bind`, where
    calls of one signature share work); ``not_supported_reasons`` checks the common capabilities
    and calls :meth:`_reasons` for backend-specific ones.
    """

    NAME: ClassVar[str]
    # stages this backend runs itself, and the chains of them it runs as one kernel
    STAGES: ClassVar[tuple[str, ...]] = ("attend",)
    FUSIONS: ClassVar[tuple[tuple[str, ...], ...]] = ()
    INDEX_BUILDER: ClassVar[str] = "torch"  # its own index builder (builder.BUILDERS)
    SUPPORTED_DTYPES: ClassVar[tuple[torch.dtype, ...]] = (torch.float16, torch.bfloat16, torch.float32)
    SUPPORTED_DEVICES: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    MAX_HEAD_DIM: ClassVar[int] = 256
    SUPPORTS_BACKWARD: ClassVar[bool] = True
    # whether the callable :meth:`bind` returns takes the call's poison (``poison=``, a 0-d
    # float32 tensor: NaN where given ids were out of range, else 1; decision_errors) and folds
    # it into its output and that output's gradients itself, where the call would otherwise
    # multiply the output by it (a launch each way and an autograd node)
    FOLDS_POISON: ClassVar[bool] = False
    # absolute tolerance (relative to the reference's largest magnitude) per input dtype
    ERROR_ATOL: ClassVar[dict[torch.dtype, float]] = {
        torch.float32: 1e-4,
        torch.float16: 4e-3,
        torch.bfloat16: 3e-2,
    }

    def not_supported_reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        """Every reason this backend cannot attend ``group`` on ``inputs``; empty when it can."""
        reasons = []
        if inputs.device.type not in self.SUPPORTED_DEVICES:
            reasons.append(f"device {inputs.device.type!r} not in {self.SUPPORTED_DEVICES}")
        if inputs.dtype not in self.SUPPORTED_DTYPES:
            names = ", ".join(str(d).removeprefix("torch.") for d in self.SUPPORTED_DTYPES)
            reasons.append(f"dtype {str(inputs.dtype).removeprefix('torch.')} not in ({names})")
        if inputs.head_dim > self.MAX_HEAD_DIM:
            reasons.append(f"head dim {inputs.head_dim} > {self.MAX_HEAD_DIM}")
        if inputs.requires_grad and not self.SUPPORTS_BACKWARD:
            reasons.append("gradients are needed and this backend has no backward pass")
        return reasons + self._reasons(group, inputs)

    def _reasons(self, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
        return []

    def supports(self, group: HeadGroup, inputs: AttentionInputs) -> bool:
        return not self.not_supported_reasons(group, inputs)

    def blocks(self, inputs: AttentionInputs) -> tuple[int, int]:
        """(block_q, block_k) the backend wants index tensors built for."""
        return 64, 64

    def input_copies(self, inputs: AttentionInputs) -> list[str]:
        """The inputs a call copies because a kernel needs another memory layout (explain()
        lists them); empty when every input is read in place."""
        return []

    def kernel_notes(self, inputs: AttentionInputs) -> list[str]:
        """Which kernels a call on ``inputs`` runs where the backend chooses among variants by
        device and release (explain() lists them, with the reason a faster one is not taken)."""
        return []

    @property
    def needs_prepare(self) -> bool:
        """Whether :meth:`attend` reads the prepared index tensors (dense backends do not)."""
        return True

    @abstractmethod
    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        """(B, Hg, Tq, D) output of the group's heads, differentiable w.r.t. q, k, v."""

    def bind(
        self, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs, *, dense_heads: tuple[int, ...] = ()
    ) -> Callable[[PreparedGroup, AttentionInputs], Tensor]:
        """:meth:`attend` for every call with the signature of ``inputs`` (sizes, dtype, device,
        scale): a backend works out here what those calls share (configurations, grids,
        constants), once (``tilesparse.execute`` binds a plan's steps per signature).
        ``dense_heads``: those of ``heads`` the plan fused in as dense heads (PerHead's), whose
        blocks are longer than the others'. By default :meth:`attend` itself."""
        return self.attend

    def bind_heads(
        self, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs
    ) -> Callable[..., Tensor]:
        """For a backend that attends without index tensors (:attr:`needs_prepare` false): its
        ``attend_heads(group, heads, inputs, decisions=)`` for every call with the signature of
        ``inputs``, called as ``(inputs, decisions=)``. By default ``attend_heads`` itself."""
        return functools.partial(self.attend_heads, group, heads)

    def __repr__(self) -> str:
        return f"<backend {self.NAME}>"


REGISTRY: dict[str, Backend] = {}


def register(backend: Backend) -> Backend:
    """Add ``backend`` to the registry under its NAME."""
    REGISTRY[backend.NAME] = backend
    return backend


def select_heads(t: Tensor, heads: tuple[int, ...], total: int) -> Tensor:
    """t[:, heads]: a view when ``heads`` is a run of consecutive heads (PerHead's groups
    usually are), a copy otherwise."""
    if heads == tuple(range(total)):
        return t
    if heads and heads == tuple(range(heads[0], heads[-1] + 1)):
        return t[:, heads[0] : heads[-1] + 1]
    return t.index_select(1, head_index(tuple(heads), t.device))
