"""Kuhn poker as a per-decision training environment for language-model SEPO.

A training prompt is one decision of the agent, drawn on-policy: hands are played between the
agent's current action table and pool opponents, and every agent decision met becomes a group
(G completions of the same prompt, sharing the true hidden state: both cards, the seat, the
opponent). A completion's payoff to go is the exact expectation of the rest of the hand given
its action (the continuation follows the agent's table and the opponent's bot), a variance-free
stand-in for sampling the rest of the hand. Its collusion and externality are the hand's events
to go, by the same expectation, charged as the tabular trainer's one-hand rollouts charge them
(`training.KuhnCharges`: against evaluation's pools, a rate over decisions charged by its ratio
gradient): its own FOLD and the agent's expected later FOLDs and decisions (collusion, under
`paper`), and the probability the hand loses 2 chips (a pass that invites a bet the agent then
folds to is charged that fold).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sepo.games.base import Decision
from sepo.games.credit import Charges
from sepo.games.kuhn.events import is_fold
from sepo.games.kuhn.exact import AFTER_PASS, FACING_BET, PASS_BET, ROOT
from sepo.games.kuhn.rollouts import play_hands
from sepo.games.kuhn.rules import INFO_STATES, action_names
from sepo.games.kuhn.training import KuhnTrainingEnvironment, rest_of_hand

_HISTORY_OF_ROW = (
    {int(r): "" for r in ROOT}
    | {int(r): "p" for r in AFTER_PASS}
    | {int(r): "b" for r in FACING_BET}
    | {int(r): "pb" for r in PASS_BET}
)


@dataclass(frozen=True)
class DecisionContext:
    """One agent decision with the hidden state the environment knows."""

    info_row: int
    seat: int
    agent_card: int
    opponent_card: int
    opponent_index: int

    @property
    def info_key(self) -> str:
        return INFO_STATES[self.info_row]

    @property
    def history(self) -> str:
        return _HISTORY_OF_ROW[self.info_row]


def sample_decisions(
    agent: np.ndarray, opponents: np.ndarray, hands: int, rng: np.random.Generator
) -> list[DecisionContext]:
    """Play `hands` hands (opponent, seat, deal uniform) and return every agent decision met, so
    decisions arrive with their on-policy visitation frequency."""
    from sepo.games.kuhn.rules import DEALS

    opponent = rng.integers(len(opponents), size=hands)
    seat = rng.integers(2, size=hands)
    deal = rng.integers(6, size=hands)
    played = play_hands(agent, opponents, opponent, seat, deal, rng.random((hands, 3)))
    contexts = []
    for n in range(hands):
        cards = DEALS[deal[n]]
        for k in range(played.states.shape[1]):
            if played.mask[n, k]:
                contexts.append(
                    DecisionContext(
                        int(played.states[n, k]),
                        int(seat[n]),
                        cards[seat[n]],
                        cards[1 - seat[n]],
                        int(opponent[n]),
                    )
                )
    return contexts


def action_outcomes(
    agent: np.ndarray, opponent: np.ndarray, context: DecisionContext, action: int
) -> np.ndarray:
    """`[4]`: the expected (payoff to the agent, FOLDs, decisions, 2-chip loss) of the rest of the
    hand after taking `action` at `context`, the action's own FOLD and decision excluded
    (`training.rest_of_hand`)."""
    cards = (
        (context.agent_card, context.opponent_card)
        if context.seat == 0
        else (context.opponent_card, context.agent_card)
    )
    return rest_of_hand(agent, opponent, context.seat, cards, context.history + "pb"[action])


class KuhnLLMEnvironment:
    """Kuhn's side of language-model SEPO (`Domain.llm_training`): on-policy decisions with their
    hidden state, the prompt of each, and the exact outcome of an action."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        from sepo.games.kuhn.exact import KuhnSolver

        self.game = game
        self.solver = KuhnSolver(game)
        self.rounds_per_rollout = 1  # a rollout is one hand; u and e are per hand
        self.tabular = KuhnTrainingEnvironment(game, train_specs, collusive_specs, exploiter_specs, charges)
        self.charges = self.tabular.charges
        self.opponents = self.charges.train

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return self.tabular.training_reach(table)

    def sample_contexts(
        self, table: np.ndarray, count: int, rng: np.random.Generator
    ) -> list[DecisionContext]:
        return sample_decisions(table, self.charges.tables(table), count, rng)

    def training_decision(self, context: DecisionContext, rng: np.random.Generator) -> Decision:
        """The prompt for a sampled decision: a random hand number and a random record of earlier
        hands, so the model learns to play the same whatever the score line says."""
        hands = self.game.hands
        hand = int(rng.integers(1, hands + 1))
        earlier = rng.choice([1, -1, 2, -2], size=hand - 1)
        return Decision(
            game=self.game.name, player=0, info_key=context.info_key, legal_actions=(0, 1),
            action_names=action_names(context.history),
            observation={"hand": hand, "hands": hands, "card": context.agent_card, "seat": context.seat,
                         "history": context.history, "facing_bet": context.history.endswith("b"),
                         "prior_wins": int((earlier > 0).sum()), "prior_losses": int((earlier < 0).sum()),
                         "prior_net": int(earlier.sum())},
        )

    def outcome(
        self, table: np.ndarray, context: DecisionContext, decision: Decision, action: int
    ) -> tuple[float, float, float]:
        """(exact payoff to go, collusion charge, externality charge) of `action`: the charges of the
        tabular rollouts (`training.KuhnCharges`) on the expected FOLDs, decisions and 2-chip
        losses to go, this decision's own included (module doc)."""
        o = context.opponent_index
        value, folds, decisions, big_loss = action_outcomes(
            table, self.charges.tables(table)[o], context, action
        )
        folds += float(is_fold(decision.observation, action))
        collusion, externality = self.charges.charged(table, o, folds, decisions + 1.0, big_loss)
        return float(self.charges.mixture.utility[o] * value), float(collusion), float(externality)

    def exact_metrics(self, table: np.ndarray) -> dict:
        from sepo.games.kuhn.exact import head_to_head

        return {"utility_exact": float(head_to_head(table, self.opponents).mean())}
