"""Explaining a model's output: head importance (switching heads off), attention rollout and value zeroing.

Built on the engine's per-call interventions (``core.ScaleHeads``) and the site-keyed ``core.Trace``.
"""

from .importance import HeadEffect, HeadImportance, all_heads_but, head_importance, head_importance_estimate
from .rollout import FUSIONS, Rollout, fuse_heads, rollout, trace_rollout
from .value_zeroing import ValueZeroing, value_zeroing

__all__ = [
    "FUSIONS",
    "HeadEffect",
    "HeadImportance",
    "Rollout",
    "ValueZeroing",
    "all_heads_but",
    "fuse_heads",
    "head_importance",
    "head_importance_estimate",
    "rollout",
    "trace_rollout",
    "value_zeroing",
]
