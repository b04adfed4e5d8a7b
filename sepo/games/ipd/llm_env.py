"""The IPD as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent met on-policy: matches are played between the
agent's current action table (the model read at the solver's information states) and the train
pool of the tabular environment (`training.py`: the domain's bots and exactly readable Axelrod
strategies), and every agent decision becomes a context that keeps the whole joint history; its
prompt shows that whole history. The table is keyed by the game's `memory`, as the exact solver
and the tabular environment key it (the whole history by default: 21,845 states at 8 rounds, each
read from the model every step, so train language models with `--memory 1` or `2`): the model is
treated as the memory-m policy it plays at the training prompts.

A completion's payoff to go is the exact expectation of the rest of the match given its action:
the opponent's move this round, then the agent's table and the opponent for the remaining rounds
(backward induction over the full-history tree, `sepo.training.matches.action_values`), a
variance-free stand-in for sampling the rest; exact for every opponent the pool accepts. Its
collusion is a DEFECT against a train opponent that is also a collusive partner, its externality
the round's expected shortfall from mutual cooperation (`events.py`, with the paper's R under
`--protocol paper`, the game's R otherwise). No gap maximiser joins the rollouts (unlike split
bargaining): the paper's train pool holds Mixed(p=0.5), so on-policy play reaches every history.
"""
from __future__ import annotations

import numpy as np

from sepo.games.ipd.events import reference_reward, round_externality
from sepo.games.ipd.rollouts import play_matches
from sepo.games.ipd.rules import DEFECT
from sepo.games.ipd.training import IPDTrainingEnvironment
from sepo.training.matches import MatchContext, action_values, match_contexts


class IPDLLMEnvironment:
    """The IPD's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs):
        self.game = game
        self.tabular = IPDTrainingEnvironment(game, train_specs, collusive_specs)
        self.solver = self.tabular.solver
        self.reward = reference_reward(game)
        self._levels = [(rows, np.stack([coop, 1.0 - coop], axis=-1), _children(len(rows)))
                        for rows, coop in self.tabular._levels]
        self._values: tuple[bytes, list[np.ndarray]] | None = None

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.tabular.training_reach(table)

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {"utility_exact": self.tabular.exact_metrics(table)["utility"]}

    def sample_contexts(self, table: np.ndarray, count: int, rng: np.random.Generator) -> list[MatchContext]:
        table = np.asarray(table, dtype=float)
        rounds = self.game.rounds
        matches_count = max(1, -(-count // rounds))
        opponent_of = rng.integers(len(self.tabular.opponents), size=matches_count)
        played = play_matches(table, self.tabular.opponents, opponent_of, rounds, self.game.payoffs.matrix,
                              rng.random((matches_count, rounds, 2)), self.game.memory)
        return match_contexts(played.rows, played.own, played.other, opponent_of)

    def training_decision(self, context: MatchContext, rng: np.random.Generator):
        state = self.game.new_initial_state()
        for joint in context.history:
            state.apply_actions(joint)
        return state.decision(0)

    def action_values(self, table: np.ndarray) -> list[np.ndarray]:
        """`[round][opponent, full history, action]`: the exact payoff to go (kept for the step's calls)."""
        table = np.asarray(table, dtype=float)
        if self._values is None or self._values[0] != table.tobytes():
            self._values = (table.tobytes(), action_values(table, self._levels, self.solver.stage.agent))
        return self._values[1]

    def outcome(self, table: np.ndarray, context: MatchContext, decision, action: int) -> tuple[float, float, float]:
        """(exact payoff to go, collusion event, expected externality this round) of `action`."""
        t, index = len(context.history), _history_index(context.history)
        value = self.action_values(table)[t][context.opponent_index, index, action]
        probs = self._levels[t][1][context.opponent_index, index]
        stage = self.game.payoffs.matrix[action]  # [opponent action, (agent, opponent) payoff]
        shortfall = round_externality(stage[:, 0], stage[:, 1], self.reward)
        collusion = float(self.tabular.is_collusive[context.opponent_index] and action == DEFECT)
        return float(value), collusion, float(probs @ shortfall)


def _children(size: int) -> np.ndarray:
    """Full history i's child after the joint move (own, other) is 4i + 2·own + other."""
    return np.arange(size)[:, None] * 4 + np.arange(4)[None, :]


def _history_index(history) -> int:
    """A full history's position in its round's level (base 4, oldest round first, as `dense_histories`)."""
    index = 0
    for own, other in history:
        index = 4 * index + 2 * own + other
    return index
