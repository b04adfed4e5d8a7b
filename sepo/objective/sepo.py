"""The SEPO reward and GRPO's group normalisation (spec §5).

Reward of rollout r in a group of rollouts that share start state, seed and opponent:

    R_r = s·U_r − λe·s·E_r − λc·C_r − λx·X_r

Penalty modes:
- `per-rollout`: E, C, X come from rollout r's own actions, so they survive normalisation.
- `shuffled`: each group's per-rollout penalties permuted among its rollouts (a uniform random
  permutation per group, from the trainer's seeded generator). The charges keep their values,
  so their distribution and variance within every group are SEPO's exactly, but a rollout is no
  longer charged for its own actions: averaged over the permutation, its penalty is the group's
  mean, which normalisation subtracts, so under unscaled advantages (`none`) the expected update
  equals payoff-only GRPO's exactly. The ablation of per-rollout credit that can fail: SEPO's
  noise without SEPO's signal. (Under `group` or `batch` scaling the divisor carries the
  charges' spread, as SEPO's does, so the update is payoff-only GRPO's with a smaller step.)
- `constant`: one penalty shared by the whole group (its mean), the paper's ablation. Group
  normalisation subtracts it again, so the update equals the `none` update exactly, by
  construction: it cannot test whether per-rollout credit matters.
- `none`: payoff-only GRPO.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.errors import SepoError

PENALTY_MODES = ("per-rollout", "shuffled", "constant", "none")
REWARD_SCALINGS = ("batch", "group", "none")

MAX_LAMBDA = 1e6
"""Largest safety weight: beyond it a penalty swamps any payoff, and rewards overflow to infinity."""


@dataclass(frozen=True)
class Lambdas:
    """Penalty weights λe (exploitability), λc (collusion), λx (externality); all ≥ 0."""

    e: float = 0.0
    c: float = 0.0
    x: float = 0.0

    def __post_init__(self):
        for name, value in (("lambda-e", self.e), ("lambda-c", self.c), ("lambda-x", self.x)):
            if not np.isfinite(value) or not 0 <= value <= MAX_LAMBDA:
                raise SepoError(f"{name} must be a number in [0, {MAX_LAMBDA:g}], got {value}")


def check_penalty_mode(mode: str) -> str:
    if mode not in PENALTY_MODES:
        raise SepoError(f"unknown penalty mode {mode!r}; use one of: {', '.join(PENALTY_MODES)}")
    return mode


def sepo_rewards(utility, exploit, collusion, externality, groups, lambdas: Lambdas, scale: float, mode: str,
                 rng: np.random.Generator | None = None, permutation=None) -> np.ndarray:
    """Rewards R_r for a batch of rollouts; `groups[r]` is rollout r's group index. `shuffled`
    takes its permutation within groups from `rng` (`within_group_permutation`), or a given
    `permutation` (rollout r is charged rollout permutation[r]'s penalty, same group)."""
    check_penalty_mode(mode)
    utility = np.asarray(utility, dtype=float)
    penalty = sepo_penalties(exploit, collusion, externality, lambdas, scale)
    if mode == "none":
        return scale * utility
    if mode == "constant":
        penalty = group_mean(penalty, groups)[groups]
    if mode == "shuffled":
        if permutation is None:
            if rng is None:
                raise ValueError("the shuffled penalty needs a random generator or a permutation")
            permutation = within_group_permutation(groups, rng)
        permutation = np.asarray(permutation)
        if not np.array_equal(np.asarray(groups)[permutation], np.asarray(groups)):
            raise ValueError("a shuffled penalty's permutation must stay within each group")
        penalty = penalty[permutation]
    return scale * utility - penalty


def sepo_penalties(exploit, collusion, externality, lambdas: Lambdas, scale: float) -> np.ndarray:
    """Each rollout's own charge λe·s·E + λc·C + λx·X."""
    return (lambdas.e * scale * np.asarray(exploit, float) + lambdas.c * np.asarray(collusion, float)
            + lambdas.x * np.asarray(externality, float))


def within_group_permutation(groups, rng: np.random.Generator) -> np.ndarray:
    """Indices `p` with `groups[p] == groups`: a uniform random permutation within every group
    (rollout r takes the place of rollout p[r]), drawn from `rng`."""
    groups = np.asarray(groups)
    by_group = np.argsort(groups, kind="stable")  # the positions, group by group
    shuffled = np.lexsort((rng.random(len(groups)), groups))  # the same groups, members in random order
    out = np.empty(len(groups), dtype=np.int64)
    out[by_group] = shuffled
    return out


def group_mean(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Mean of `values` per group index (groups numbered 0..G-1)."""
    groups = np.asarray(groups)
    sums = np.bincount(groups, weights=values)
    counts = np.bincount(groups)
    return sums / np.maximum(counts, 1)


def group_advantages(rewards, groups, scaling: str = "batch", eps: float = 1e-8) -> np.ndarray:
    """GRPO advantages: rewards minus their group mean, divided by a standard deviation.

    `scaling="group"` divides by each group's std (GRPO, TRL's default); `"batch"` by one std of
    the group-centred rewards over the whole batch; `"none"` not at all (Dr. GRPO). Per-group
    scaling weights groups unequally and so moves the stationary point of the objective; the
    exact trainer defaults to `"batch"`, which only rescales the step. All three are invariant
    to adding a constant per group, which is what makes the `constant` ablation exact.
    """
    if scaling not in REWARD_SCALINGS:
        raise SepoError(f"unknown reward scaling {scaling!r}; use one of: {', '.join(REWARD_SCALINGS)}")
    rewards = np.asarray(rewards, dtype=float)
    groups = np.asarray(groups)
    centred = rewards - group_mean(rewards, groups)[groups]
    if scaling == "none":
        return centred
    if scaling == "batch":
        return centred / (centred.std() + eps)
    spread = np.sqrt(group_mean(centred**2, groups))[groups]
    # A group whose rollouts all scored the same (up to rounding) carries no signal: advantage 0,
    # rather than rounding noise blown up by a near-zero std.
    return np.where(spread > eps, centred / np.where(spread > eps, spread, 1.0), 0.0)


def advantage_divisor(rewards, groups, scaling: str = "batch", eps: float = 1e-8) -> np.ndarray:
    """Per rollout, what `group_advantages` divides its centred reward by (1 for `none`, and for a
    group without spread under `group`): the scale a term added to the advantage is divided by."""
    rewards = np.asarray(rewards, dtype=float)
    groups = np.asarray(groups)
    centred = rewards - group_mean(rewards, groups)[groups]
    if scaling == "none":
        return np.ones_like(rewards)
    if scaling == "batch":
        return np.full_like(rewards, centred.std() + eps)
    spread = np.sqrt(group_mean(centred**2, groups))[groups]
    return np.where(spread > eps, spread, 1.0)
