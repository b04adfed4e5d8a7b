"""Per-rollout exploitability attribution in exact games (spec §5).

A rollout that took action a at information state I is charged

    E(I, a) = [∂e/∂π(a|I) − Σ_b π(b|I) ∂e/∂π(b|I)] / ρ(I)

where ∂e/∂π is the Danskin derivative of exploitability at the current policy (the best
response held fixed: minus half the own-reach-weighted counterfactual value of a against it)
and ρ(I) is the probability that a training rollout reaches I. E_r sums E over r's decisions.
Centring per state makes later decisions' charges average to zero given earlier ones; dividing
by the reach undoes the sampling frequency. Together, E[E_r · ∇log P(r)] = ∇e exactly, so the
policy-gradient update on R = s·U − λe·s·E is an unbiased ascent step on s·(u − λe·e).
"""
from __future__ import annotations

import numpy as np


def exploitation_attribution(policy: np.ndarray, gradient: np.ndarray, reach: np.ndarray) -> np.ndarray:
    """`[states, actions]` charge per action given ∂e/∂π (`gradient`) and training reach ρ."""
    baseline = (policy * gradient).sum(-1, keepdims=True)
    safe_reach = np.where(reach > 0, reach, 1.0)[..., None]
    return np.where(reach[..., None] > 0, (gradient - baseline) / safe_reach, 0.0)
