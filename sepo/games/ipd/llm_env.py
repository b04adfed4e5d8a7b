"""The IPD as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent met on-policy: matches are played between the
agent's current action table (the model read at the solver's information states) and the train
pool of the tabular environment (`training.py`: the domain's bots and exactly readable Axelrod
strategies), and every agent decision becomes a context that keeps the whole joint history; its
prompt shows that whole history. The table is keyed by the game's `memory`, as the exact solver
and the tabular environment key it (the whole history by default: 21,845 states at 8 rounds, each
read from the model every step, so train language models with `--memory 1` or `2`): the model is
treated as the memory-m policy it plays at the training prompts.

The matches' opponents are the tabular environment's rollout opponents: the train pool and the
current gap maximiser (and the opponents of charged terms), drawn uniformly (`training.py`: the maximiser
reaches every key the gap's gradient charges, whatever the pool). A completion's payoff to go is the exact
expectation of the rest of the match given its action: the opponent's move this round, then the agent's table
and the opponent for the remaining rounds (backward induction over the full-history tree,
`sepo.games.matches.action_values`), a variance-free stand-in for sampling the rest; exact for
every opponent the pool accepts. Its collusion and externality are the events to go, by the same
backward induction: the expected DEFECTs (against a collusive partner) and the expected shortfalls from mutual
cooperation (`events.py`, with the paper's R under `--protocol paper`, the game's R otherwise) over this round
and the rest of the match, so an opponent's reaction (TFT defecting after a DEFECT, the agent answering) is
charged to the move that caused it, as the tabular trainer's whole-match rollouts charge it. The matches'
opponents and each one's credits for payoff, collusion and externality are the tabular environment's
(`sepo.games.credit`: the collusive partners and exploiters join when λc or λx is charged), so the
charged c and x are evaluation's.
"""
from __future__ import annotations

import numpy as np

from sepo.games.credit import Charges
from sepo.games.ipd.rollouts import play_matches
from sepo.games.ipd.training import IPDTrainingEnvironment
from sepo.games.matches import action_values, match_contexts
from sepo.games.records import MatchContext


class IPDLLMEnvironment:
    """The IPD's side of language-model SEPO (`Domain.llm_training`)."""

    joint_advantages = True

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.tabular = IPDTrainingEnvironment(game, train_specs, collusive_specs, exploiter_specs, charges)
        self.solver = self.tabular.solver
        self.rounds_per_rollout = game.rounds
        self._children = [_children(len(rows)) for rows, _ in self.tabular._levels]
        self._values: tuple[bytes, list[list[np.ndarray]]] | None = None

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.tabular.training_reach(table)

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {"utility_exact": self.tabular.exact_metrics(table)["utility"]}

    def sample_contexts(self, table: np.ndarray, count: int, rng: np.random.Generator) -> list[MatchContext]:
        table = np.asarray(table, dtype=float)
        rounds = self.game.rounds
        matches_count = max(1, -(-count // rounds))
        opponent_of = rng.integers(self.tabular.mixture.size, size=matches_count)
        played = play_matches(
            table,
            self.tabular.rollout_opponents(table),
            opponent_of,
            rounds,
            self.game.payoffs.matrix,
            rng.random((matches_count, rounds, 2)),
            self.game.memory,
        )
        return match_contexts(played.rows, played.own, played.other, opponent_of)

    def training_decision(self, context: MatchContext, rng: np.random.Generator):
        state = self.game.new_initial_state()
        for joint in context.history:
            state.apply_actions(joint)
        return state.decision(0)

    def _levels(self, table: np.ndarray) -> list[tuple]:
        """Per round: the key rows, every rollout opponent's move probabilities `[n + 1, histories,
        2]` and the children of each full history."""
        cooperation = self.tabular.cooperation(table)
        return [(rows, np.stack([coop, 1.0 - coop], axis=-1), children)
                for (rows, _), coop, children in zip(self.tabular._levels, cooperation, self._children)]

    def action_values(self, table: np.ndarray) -> list[list[np.ndarray]]:
        """The exact payoff, collusion events and externality events to go, each `[round][opponent,
        full history, action]`, kept for the step's calls."""
        table = np.asarray(table, dtype=float)
        if self._values is None or self._values[0] != table.tobytes():
            levels = self._levels(table)
            own = np.broadcast_to(np.arange(2)[:, None], (2, 2))
            stages = (self.solver.stage.agent, *self.tabular.events(own, self.game.payoffs.matrix))
            self._values = (table.tobytes(), [action_values(table, levels, stage) for stage in stages])
        return self._values[1]

    def outcome(
        self, table: np.ndarray, context: MatchContext, decision, action: int
    ) -> tuple[float, float, float]:
        """(payoff, collusion events, externality events) to go of `action`, exact, each scaled by
        the opponent's credit (module doc)."""
        t, index, o = len(context.history), _history_index(context.history), context.opponent_index
        payoff, defections, shortfall = (float(v[t][o, index, action]) for v in self.action_values(table))
        mixture = self.tabular.mixture
        return (
            mixture.utility[o] * payoff,
            mixture.collusion[o] * defections,
            mixture.externality[o] * shortfall,
        )

    def alignment_advantages(
        self, table: np.ndarray, context: MatchContext, action: int
    ) -> tuple[np.ndarray, float]:
        """Advantage Alignment's inputs at a decision, exact, in payoff units of the match: the
        agent's advantages of its past rounds' joint moves (credited as its payoff is) and the
        opponent's advantage of `action` this round, in expectation over the opponent's move
        (`IPDTrainingEnvironment.joint_values`)."""
        tabular, o = self.tabular, context.opponent_index
        own = np.array([[a for a, _ in context.history]], dtype=np.int64).reshape(1, -1)
        other = np.array([[b for _, b in context.history]], dtype=np.int64).reshape(1, -1)
        past = tabular.match_advantages(table, own, other, np.array([o]))[0, :, 0] * tabular.weight[o]
        t, index = len(context.history), _history_index(context.history)
        values = tabular.joint_values(table)
        cooperate = tabular.cooperation(table)[t][o, index]
        after = (
            self.game.payoffs.matrix[action, :, 1]
            + values[t + 1][o, 4 * index + 2 * action + np.arange(2), 1]
        )
        return past, float(np.dot([cooperate, 1.0 - cooperate], after) - values[t][o, index, 1])


def _children(size: int) -> np.ndarray:
    """Full history i's child after the joint move (own, other) is 4i + 2·own + other."""
    return np.arange(size)[:, None] * 4 + np.arange(4)[None, :]


def _history_index(history) -> int:
    """A full history's position in its round's level (base 4, oldest round first, as `dense_histories`)."""
    index = 0
    for own, other in history:
        index = 4 * index + 2 * own + other
    return index
