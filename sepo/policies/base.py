"""The one protocol every agent follows: observation in, distribution over legal actions out.

Scripted bots, tabular policies, Hugging Face models and API models all implement `Policy`.
`act` draws actions for a batch of pending decisions at once (one batched model call per turn
for LLMs); it returns, with each action, the text that produced it and how its parse went, so
invalid outputs are counted rather than hidden.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from sepo.games.base import Decision


@dataclass(frozen=True)
class Choice:
    """One chosen action, with the evidence behind it.

    `parse_status` is "ok" for a valid choice, else the parser's failure ("no_action",
    "ambiguous", "illegal") and `rule` names the failure rule that supplied the action."""

    action: int
    text: str | None = None
    parse_status: str = "ok"
    rule: str | None = None

    @property
    def invalid(self) -> bool:
        return self.parse_status != "ok"


class Policy(abc.ABC):
    """A (possibly stochastic) policy over legal actions."""

    name: str = "policy"

    @abc.abstractmethod
    def action_probabilities(self, decision: Decision) -> dict[int, float]:
        """Probability of each legal action at `decision`."""

    def batch_action_probabilities(self, decisions: list[Decision]) -> list[dict[int, float]]:
        return [self.action_probabilities(d) for d in decisions]

    def act(self, decisions: list[Decision], rng: np.random.Generator) -> list[Choice]:
        """Sample one action per decision (one draw from `rng` per decision, in order)."""
        choices = []
        for probs in self.batch_action_probabilities(decisions):
            actions = list(probs)
            weights = np.array([probs[a] for a in actions], dtype=float)
            choices.append(Choice(actions[_sample_index(weights, rng)]))
        return choices

    def reset(self) -> None:
        """Forget per-episode state (scripted bots with memory override this)."""


def _sample_index(weights: np.ndarray, rng: np.random.Generator) -> int:
    cumulative = np.cumsum(weights)
    return int(
        min(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(weights) - 1)
    )
