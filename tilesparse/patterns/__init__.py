"""Sparsity patterns: specs, criteria and decisions. Knows nothing of kernels."""

from . import specs
from .criteria import Criterion, CriterionFn, criterion, get_criterion, registered
from .decisions import DECISION_FIELDS, Decisions, check_decisions
from .specs import *  # noqa: F403 (the spec models: specs.__all__ lists them once)
from .specs import _Spec as SpecBase

__all__ = [
    *specs.__all__,
    "DECISION_FIELDS",
    "Criterion",
    "CriterionFn",
    "Decisions",
    "SpecBase",
    "check_decisions",
    "criterion",
    "get_criterion",
    "registered",
]
