"""The planner: picks a backend per head group by estimated cost, builds and explains the
stage graph; ``cost`` is the cost model, ``calibrate`` fits it from benchmark JSON."""

from .cost import CostTable, default_costs, estimate_visited
from .plan import Assignment, NoBackendError, Plan, Step, format_refusals, make_plan, simplify

__all__ = [
    "Assignment",
    "CostTable",
    "NoBackendError",
    "Plan",
    "Step",
    "default_costs",
    "estimate_visited",
    "format_refusals",
    "make_plan",
    "simplify",
]
