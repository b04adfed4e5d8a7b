"""Advantage Alignment (Duque, Aghajohari, Cooijmans, Ciuca, Zhang, Gidel, Courville, "Advantage
Alignment Algorithms", ICLR 2025, arXiv:2406.14662): the opponent-shaping baseline beside SEPO.

Agent 1's policy gradient weights its action at time t by

    A*_t = A^1(s_t, a_t, b_t) + β · γ · ( Σ_{k<t} γ^{t−k} A^1(s_k, a_k, b_k) ) · A^2(s_t, a_t, b_t)

(the authors' formula, leading γ included, so β here is their β) where A^1 and A^2 are the
agent's and the opponent's advantages of the joint action (a_t, b_t) and β ≥ 0 weighs the
opponent-shaping term: an action that raises the opponent's advantage is
made more likely after a history in which the agent did well, less likely after one in which it
did badly (reciprocity). The update is E[Σ_t A*_t ∇θ log π^1(a_t | s_t)].

In sepo the first term is the trainer's own group-relative advantage (payoff-only GRPO: group-
centred s·U, as in the LLM version of the method, which trains agents in a repeated dilemma with
a group-relative baseline), and the second is added to it. The environment supplies A^1 and A^2
exactly (backward induction over the joint-history tree), scaled by s, in units of the match's
return. The tabular trainer adds the term to every decision of a rollout, divided by T (its U is
the return per round) and by the reward scale (`sepo.objective.sepo.advantage_divisor`), so β
weighs it against the payoff gradient whatever the scaling; the language-model trainer adds it,
undivided, to the reward of a completion (whose payoff to go is in units of the return), with
A^2 in expectation over the opponent's move, and TRL centres it within the group. Both have the
same expected update (`tests/training/test_advantage_alignment.py`).
"""
from __future__ import annotations

import math

import numpy as np

from sepo.errors import SepoError

METHODS = ("sepo", "advantage-alignment")
"""Training methods: `sepo` (the reward of `--penalty`: per-rollout SEPO, constant or payoff-only)
and `advantage-alignment` (payoff-only GRPO plus the opponent-shaping term)."""


def check_method(method: str) -> str:
    if method not in METHODS:
        raise SepoError(f"unknown method {method!r}; use one of: {', '.join(METHODS)}")
    return method


def check_alignment(beta, gamma) -> None:
    """β finite and ≥ 0, γ in [0, 1], else one line."""
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta) or beta < 0:
        raise SepoError(f"--aa-beta must be a finite number >= 0, got {beta}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0 <= gamma <= 1:
        raise SepoError(f"--aa-gamma must be a number in [0, 1], got {gamma}")


def past_advantage_weights(own: np.ndarray, gamma: float) -> np.ndarray:
    """`[rollouts, T]`: Σ_{k<t} γ^{t−k} A^1_k for every decision t of every rollout (0 at t = 0),
    from the agent's advantages `own[r, k]`."""
    own = np.asarray(own, dtype=float)
    weights = np.zeros_like(own)
    running = np.zeros(own.shape[0])
    for t in range(1, own.shape[1]):
        running = gamma * (running + own[:, t - 1])
        weights[:, t] = running
    return weights


def alignment_term(own: np.ndarray, other: np.ndarray, beta: float, gamma: float) -> np.ndarray:
    """`[rollouts, T]`: the opponent-shaping term β · γ · (Σ_{k<t} γ^{t−k} A^1_k) · A^2_t of every
    decision (the authors' formula, its leading γ included), from the agent's advantages `own` and
    the opponent's `other` (both `[rollouts, T]`)."""
    return beta * gamma * past_advantage_weights(own, gamma) * np.asarray(other, dtype=float)
