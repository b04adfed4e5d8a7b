"""The pricing market (two firms) as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent met on-policy: markets are played between the
agent's current action table (the model read at the solver's canonical prompts, keyed by the
game's `memory`, 1 by default) and the tabular environment's rollout rivals (the train pool and the
current gap maximiser, `training.py`); every agent decision becomes a context that keeps the whole
joint history, which its prompt shows. A completion's payoff, collusion events and externality to
go are exact expectations over the rest of the market given its price, by backward induction over
(period, agent state, rival state) (every rival is a finite-state machine), a variance-free
stand-in for sampling the rest: each scaled by the rival's credit for it, as in the tabular
environment (`sepo.games.credit`: evaluation's pools for each term).
"""
from __future__ import annotations

import numpy as np

from sepo.games.credit import Charges
from sepo.games.matches import match_contexts
from sepo.games.pricing.training import COLLUSION, EXTERNALITY, PAYOFF, PricingTrainingEnvironment
from sepo.games.records import MatchContext


class PricingLLMEnvironment:
    """The pricing market's side of language-model SEPO (`Domain.llm_training`)."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.game = game
        self.tabular = PricingTrainingEnvironment(
            game, train_specs, collusive_specs, exploiter_specs, charges
        )
        self.solver = self.tabular.solver
        self.rounds_per_rollout = game.rounds
        self.weight = self.tabular.weight
        self._values: tuple[bytes, list] | None = None

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.tabular.training_reach(table)

    def exact_metrics(self, table: np.ndarray) -> dict:
        """The tabular environment's exact numbers at the model's table: utility, collusion and
        externality (suffixed `_exact`, beside the trainer's sampled ones), Δ and consumer surplus."""
        found = self.tabular.exact_metrics(table)
        out = {"utility_exact": found["utility"], "externality_exact": found["externality"]}
        if "collusion" in found:
            out["collusion_exact"] = found["collusion"]
        out.update({k: v for k, v in found.items() if k.startswith(("delta_", "consumer_surplus_"))})
        return out

    def sample_contexts(self, table: np.ndarray, count: int, rng: np.random.Generator) -> list[MatchContext]:
        table = np.asarray(table, dtype=float)
        rounds = self.game.rounds
        markets = max(1, -(-count // rounds))
        rival_of = rng.integers(len(self.weight), size=markets)
        own, other, rows = self.tabular.play(
            table, self.tabular.rollout_rivals(table), rival_of, rng.random((markets, rounds, 2))
        )
        return match_contexts(rows, own, other, rival_of)

    def training_decision(self, context: MatchContext, rng: np.random.Generator):
        return self.game.decision_after(context.history, 0)

    def action_values(self, table: np.ndarray) -> list[list[np.ndarray]]:
        """Per rollout rival, per period: `[H, S, K, 3]` the expected (payoff, collusion event,
        externality event) summed over this period and the rest, when the agent charges each price
        at agent state h and rival state s (kept for the step's calls)."""
        table = np.asarray(table, dtype=float)
        if self._values is None or self._values[0] != table.tobytes():
            env, k = self.tabular, self.game.k
            stages = env.quantities[[PAYOFF, COLLUSION, EXTERNALITY]].transpose(1, 2, 0)  # [a, b, 3]
            per_rival = []
            for rival in env.rollout_rivals(table):
                following = rival.next.transpose(0, 2, 1)  # [s, a, b]
                values, later = [None] * len(env._levels), None
                for t in reversed(range(len(env._levels))):
                    rows, children = env._levels[t]
                    probs = rival.level(t, len(rows))  # [H, S, K]
                    after = np.broadcast_to(stages, (len(rows), rival.states, k, k, 3))
                    if later is not None:
                        after = after + later[children.reshape(len(rows), 1, k, k), following[None]]
                    values[t] = np.einsum("hsb,hsabq->hsaq", probs, after)
                    later = np.einsum("ha,hsaq->hsq", table[rows], values[t])
                per_rival.append(values)
            self._values = (table.tobytes(), per_rival)
        return self._values[1]

    def outcome(
        self, table: np.ndarray, context: MatchContext, decision, action: int
    ) -> tuple[float, float, float]:
        """(payoff, collusion events, externality events) to go of `action`, exact, each scaled by
        the rival's credit (module doc)."""
        env = self.tabular
        t, index = len(context.history), context.opponent_index
        h = context.info_row - env._offsets[t]
        rivals = env.rollout_rivals(np.asarray(table, dtype=float))
        machine = rivals[index].machine
        s = 0 if machine is None else machine.state_after([(other, own) for own, other in context.history])
        payoff, collusion, externality = self.action_values(table)[index][t][h, s, action]
        mixture = env.mixture
        return (mixture.utility[index] * float(payoff), mixture.collusion[index] * float(collusion),
                mixture.externality[index] * float(externality))
