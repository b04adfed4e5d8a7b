"""Split bargaining as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent met on-policy: matches are played between the
agent's current action table (the model read at the solver's canonical prompts) and the
rollout opponents of the tabular environment (the train pool and the current gap maximiser,
see `training.py`), and every agent decision becomes a context that keeps the whole joint
history. Its prompt shows that whole history. A completion's payoff to go is the exact
expectation of the rest of the match given its demand: the opponent's demand this round, then
the agent's table and the opponent for the remaining rounds, a variance-free stand-in for
sampling the rest. Its collusion and externality are the events to go, by the same expectation:
the greedy demands and the externality over this round and the rest of the match
(`events.round_events` under the game's protocol, as evaluation counts them); each is scaled by
the opponent's credit for it, as in the tabular environment (`sepo.games.credit`: the collusive
partners and exploiters join the opponents when λc or λx is charged), so the events an opponent's reaction
causes in later rounds are charged to the demand that caused them, as the tabular trainer's whole-match
rollouts charge them. The table is keyed by the game's
`memory` (1 by default), so the continuation treats the model as the memory-m policy it plays at
the canonical prompts.
"""
from __future__ import annotations

import numpy as np

from sepo.games.credit import Charges
from sepo.games.matches import match_contexts
from sepo.games.negotiation.bots import DemandSpec
from sepo.games.negotiation.exact import key_rows
from sepo.games.negotiation.rollouts import play_matches
from sepo.games.negotiation.training import NegotiationTrainingEnvironment
from sepo.games.records import MatchContext as DecisionContext  # opponent_index n: the maximiser


class NegotiationLLMEnvironment:
    """Split bargaining's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.tabular = NegotiationTrainingEnvironment(
            game, train_specs, collusive_specs, exploiter_specs, charges
        )
        self.solver = self.tabular.solver
        self.rounds_per_rollout = game.rounds
        self.spec = DemandSpec.of(game)
        self.weight = self.tabular.weight

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.tabular.training_reach(table)

    def exact_metrics(self, table: np.ndarray) -> dict:
        return {"utility_exact": self.tabular.exact_metrics(table)["utility"]}

    def sample_contexts(
        self, table: np.ndarray, count: int, rng: np.random.Generator
    ) -> list[DecisionContext]:
        table = np.asarray(table, dtype=float)
        rounds = self.game.rounds
        matches_count = max(1, -(-count // rounds))
        opponent_of = rng.integers(len(self.weight), size=matches_count)
        played = play_matches(
            self.game,
            table,
            self.tabular.rollout_opponents(table),
            opponent_of,
            rng.random((matches_count, rounds, 2)),
        )
        return match_contexts(played.rows, played.own, played.other, opponent_of)

    def training_decision(self, context: DecisionContext, rng: np.random.Generator):
        return self.game.decision_after(context.history, 0)

    def context_opponent(self, context: DecisionContext):
        """Cheap talk (`sepo train --talk`): the context's pool opponent and its own decision this
        round; None against the gap maximiser, which has no line."""
        n, index = len(self.tabular.opponents), context.opponent_index
        if index == n:
            return None
        bot = self.tabular.opponents[index] if index < n else self.tabular.extra[index - n - 1]
        mirrored = tuple((other, own) for own, other in context.history)
        return bot, self.game.decision_after(mirrored, 1)

    def _opponent_probs(self, opponent, history) -> np.ndarray:
        own = np.array([[o for _, o in history]], dtype=np.int64).reshape(1, len(history)) + self.spec.low
        other = np.array([[a for a, _ in history]], dtype=np.int64).reshape(1, len(history)) + self.spec.low
        return opponent.probabilities(own, other, self.spec)[0]

    def _stages(self) -> np.ndarray:
        """`[3, K, K]`: the agent's payoff, collusion event and externality event of each joint
        demand (agent's, opponent's)."""
        k = self.game.num_demands
        own, other = (
            np.broadcast_to(np.arange(k)[:, None], (k, k)),
            np.broadcast_to(np.arange(k)[None, :], (k, k)),
        )
        return np.stack([self.tabular.stage, *self.tabular.events(own, other)])

    def _to_go(self, table, opponent, history, stages) -> np.ndarray:
        """The expected (payoff, collusion events, externality events) over the rounds after `history`."""
        if len(history) >= self.game.rounds:
            return np.zeros(len(stages))
        k = self.game.num_demands
        agent = np.array([[a for a, _ in history]], dtype=np.int64).reshape(1, len(history))
        other = np.array([[o for _, o in history]], dtype=np.int64).reshape(1, len(history))
        mine = table[key_rows(agent, other, self.game.memory, k)[0]]
        return sum(
            (p * self._after(table, opponent, history, a, stages) for a, p in enumerate(mine) if p > 0),
            np.zeros(len(stages)),
        )

    def _after(self, table, opponent, history, action, stages) -> np.ndarray:
        """The expected (payoff, collusion events, externality events) of this round and the rest
        when the agent demands `action` after `history`."""
        total = np.zeros(len(stages))
        for o, q in enumerate(self._opponent_probs(opponent, history)):
            if q > 0:
                total += q * (
                    stages[:, action, o] + self._to_go(table, opponent, history + ((action, o),), stages)
                )
        return total

    def outcome(
        self, table: np.ndarray, context: DecisionContext, decision, action: int
    ) -> tuple[float, float, float]:
        """(payoff, collusion events, externality events) to go of `action`, exact, each scaled by
        the opponent's credit (module doc)."""
        table = np.asarray(table, dtype=float)
        opponent = self.tabular.rollout_opponents(table)[context.opponent_index]
        weight = self.weight[context.opponent_index]
        value, greedy, loss = self._after(table, opponent, context.history, action, self._stages())
        mixture, o = self.tabular.mixture, context.opponent_index
        return (
            weight * float(value),
            mixture.collusion[o] * float(greedy),
            mixture.externality[o] * float(loss),
        )
