"""Sparsity patterns: specs, criteria and decisions. Knows nothing of kernels."""

from .criteria import Criterion, CriterionFn, criterion, get_criterion, registered
from .decisions import DECISION_FIELDS, Decisions, check_decisions
from .specs import Dense, Hash, Hybrid, MaskMod, PerHead, QKDrop, Spec, TopKFeatures, and_masks, parse_spec
from .specs import _Spec as SpecBase

__all__ = [
    "DECISION_FIELDS",
    "Criterion",
    "CriterionFn",
    "Decisions",
    "Dense",
    "Hash",
    "Hybrid",
    "MaskMod",
    "PerHead",
    "QKDrop",
    "Spec",
    "SpecBase",
    "TopKFeatures",
    "and_masks",
    "check_decisions",
    "criterion",
    "get_criterion",
    "parse_spec",
    "registered",
]
