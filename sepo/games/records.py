"""The records that domains and the generic layers both read: played episodes, sampled training
rollouts, and decisions of a repeated match.

They live here, beside the game API, so that imports run one way: the generic layers
(`sepo.evaluation`, `sepo.training`, `sepo.metrics`) and the domains (`sepo.games.<name>`) both
import them, and no domain imports the layers above it to get them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from sepo.games.base import RoundResult


@dataclass
class DecisionRecord:
    """One agent decision: its information state, the action, and the observation the domain's
    events and behaviour tables read."""

    round: int
    info_key: str
    action: int
    action_name: str
    observation: Mapping[str, Any] = field(default_factory=dict)
    parse_status: str = "ok"
    rule: str | None = None
    text: str | None = None
    message: str | None = None
    """The message the agent sent this round (cheap talk), as delivered."""


@dataclass
class EpisodeRecord:
    """One played episode from the agent's point of view."""

    opponent: str
    pool: str
    seed: int
    agent_player: int
    rounds: list[RoundResult]
    decisions: list[DecisionRecord] = field(default_factory=list)

    @property
    def agent_payoffs(self) -> np.ndarray:
        """The agent's payoff in each round."""
        return np.array([r.payoffs[self.agent_player] for r in self.rounds], dtype=float)

    @property
    def opponent_payoffs(self) -> np.ndarray:
        """The other players' payoffs summed, in each round."""
        return np.array(
            [sum(p for i, p in enumerate(r.payoffs) if i != self.agent_player) for r in self.rounds],
            dtype=float,
        )

    def third_party_payoffs(self, name: str) -> np.ndarray:
        """A third party's payoff in each round (0 where it is not recorded)."""
        return np.array([r.third_party.get(name, 0.0) for r in self.rounds], dtype=float)


@dataclass
class Rollouts:
    """A batch of sampled rollouts from the agent's point of view.

    `states[r, k]` / `actions[r, k]` are rollout r's k-th agent decision (row of the table, column
    of the action), valid where `mask[r, k]`; `groups[r]` its group; `utility[r]` its payoff;
    `collusion[r]`, `externality[r]` its events (0 where they do not apply); `advantages[r, k]`
    (only when asked for, from an environment with `joint_advantages = True`) the agent's and the
    opponent's exact advantages of the joint action at decision k, in units of the match's return
    (U is it per round), the agent's credited as U is (Advantage Alignment,
    `sepo.objective.advantage_alignment`)."""

    states: np.ndarray
    actions: np.ndarray
    mask: np.ndarray
    groups: np.ndarray
    utility: np.ndarray
    collusion: np.ndarray
    externality: np.ndarray
    advantages: np.ndarray | None = None


def match_groups(
    rng: np.random.Generator, groups: int, group_size: int, opponents: int
) -> tuple[np.ndarray, np.ndarray]:
    """(each rollout's group, each rollout's opponent index): `groups` groups of `group_size`
    rollouts, each group sharing one opponent drawn uniformly from `opponents` (a repeated-match
    trainer's train pool, then its gap maximiser)."""
    group_opponent = rng.integers(opponents, size=groups)
    group_of = np.repeat(np.arange(groups), group_size)
    return group_of, group_opponent[group_of]


def credited_matches(
    rows: np.ndarray,
    own: np.ndarray,
    group_of: np.ndarray,
    opponent_of: np.ndarray,
    weight: np.ndarray,
    is_collusive: np.ndarray,
    utility: np.ndarray,
    collusion: np.ndarray,
    externality: np.ndarray,
    advantages: np.ndarray | None = None,
) -> Rollouts:
    """Whole-match rollouts (the agent decides every round) under the paper's per-pool credit:
    rollout r's per-round `utility`, `collusion` and `externality` scaled by its opponent's credit
    `weight[opponent_of[r]]`, collusion counted only against a collusive partner (`is_collusive`
    covers the train entries; the entries after them, the gap maximiser, are never partners), and
    the agent's exact advantages (`advantages[..., 0]`, scaled in place) credited as its utility."""
    credit = weight[opponent_of]
    collusive = np.zeros(len(weight), dtype=bool)
    collusive[: len(is_collusive)] = is_collusive
    if advantages is not None:
        advantages[..., 0] *= credit[:, None]
    return Rollouts(
        rows,
        own,
        np.ones_like(own, dtype=bool),
        group_of,
        credit * utility,
        np.where(collusive[opponent_of], credit * collusion, 0.0),
        credit * externality,
        advantages,
    )


@dataclass(frozen=True)
class MatchContext:
    """One agent decision of a repeated match: its row in the solver's table, the joint history
    ((agent action, opponent action) per past round), and the opponent (an index the environment
    defines)."""

    info_row: int
    history: tuple
    opponent_index: int
