"""The speculation policy: each step's plan (its depth, each request's drafts, whether it may run in
parallel), decided in one place from the step as plain data (policy.py). Its constants: tuning.py."""

from minedraft.policy.plan import PlanCounts, RequestView, StepKey, StepPlan, StepResult, StepView, VerifiedDrafts
from minedraft.policy.policy import SpeculationPolicy

__all__ = ["PlanCounts", "RequestView", "SpeculationPolicy", "StepKey", "StepPlan", "StepResult", "StepView", "VerifiedDrafts"]
