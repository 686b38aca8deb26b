"""The planner: picks a backend per head group, builds and explains the stage graph."""

from .plan import AUTO_ORDER, Assignment, NoBackendError, Plan, make_plan

__all__ = ["AUTO_ORDER", "Assignment", "NoBackendError", "Plan", "make_plan"]
