"""The planner: picks an attention backend and an index builder per head group, each by
estimated cost, builds and explains the stage graph and the steps a call runs; ``cost`` is
the cost model, ``calibrate`` fits it from benchmark JSON."""

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
