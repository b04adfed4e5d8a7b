"""Kuhn poker as a training environment for the exact tabular SEPO trainer.

A group shares its start state: the opponent (uniform over the train pool, and, when λc or λx is
charged, the collusive partners and exploiters evaluation counts them against, `sepo.games.credit`;
under rigorous the exact best response to the current table is one of the exploiters), the
agent's seat and the deal; its rollouts are single hands played by the vectorised rules of
`rollouts.py`. The training reach is the agent's own reach times the opponents' and chance's.

The events are evaluation's (`events.py`): collusion, under `paper` only, a FOLD, over the agent's
decisions against the collusive pool (Kuhn has no collusion under `rigorous`: a nonzero λc is
refused); externality a 2-chip loss, over the hands (`rigorous`) or the agent's decisions
(`paper`) against the train and exploiter pools. A rate over decisions is a ratio of expectations,
c = F/D (F the FOLDs, D the decisions per hand, pooled over the partners), whose gradient is
(∇F − c·∇D)/D: a rollout is charged (its FOLDs − c·its decisions)/D with c and D exact at the current
table (`hand_expectations`), so the expected update is that of evaluation's c, not of the FOLDs
per hand. Externality under `paper` is charged the same way.
"""
from __future__ import annotations

import numpy as np

from sepo.games.credit import Charges, training_mixture
from sepo.games.kuhn import exact as kuhn_exact
from sepo.games.kuhn.rollouts import play_hands
from sepo.games.kuhn.rules import DEALS, INFO_STATES, is_hand_over, seat0_payoff, seat_to_act
from sepo.games.records import Rollouts

PAYOFF, FOLDS, DECISIONS, BIG_LOSSES = range(4)


def hand_expectations(agent: np.ndarray, opponent: np.ndarray) -> np.ndarray:
    """`[4]`: the expected (agent's payoff, its FOLDs, its decisions, 2-chip losses) per hand
    against `opponent`, over the six deals and both seats, uniformly."""
    total = np.zeros(4)
    for cards in DEALS:
        for seat in (0, 1):
            total += rest_of_hand(agent, opponent, seat, cards, "")
    return total / (2 * len(DEALS))


def rest_of_hand(agent: np.ndarray, opponent: np.ndarray, seat: int, cards, history: str) -> np.ndarray:
    """`[4]`: the expected (payoff, FOLDs, decisions, 2-chip loss) of the agent in `seat` from
    `history` on (its later decisions only), the agent playing `agent` and the other seat
    `opponent`, `cards` (seat 0's, seat 1's)."""
    if is_hand_over(history):
        payoff = seat0_payoff(history, *cards) * (1 if seat == 0 else -1)
        return np.array([payoff, 0.0, 0.0, float(payoff <= -2)])
    actor = seat_to_act(history)
    mine = actor == seat
    probs = (agent if mine else opponent)[INFO_STATES.index(f"{cards[actor]}{history}")]
    out = np.zeros(4)
    for action in (0, 1):
        if probs[action] > 0:
            own = np.array([0.0, float(mine and history.endswith("b") and action == 0), float(mine), 0.0])
            out += probs[action] * (own + rest_of_hand(agent, opponent, seat, cards, history + "pb"[action]))
    return out


class KuhnCharges:
    """The opponents of Kuhn's rollouts and the per-rollout collusion and externality charges,
    shared by the tabular and the language-model environments (module doc)."""

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.protocol = game.protocol
        self.mixture = training_mixture(
            train_specs,
            collusive_specs,
            exploiter_specs,
            charges=charges,
            maximiser=False,
            best_response_counts=game.protocol == "rigorous",
        )
        self.entries = [*train_specs, *self.mixture.extra]  # None: the best response to the current table
        self.fixed = [None if spec is None else spec.build(game).table for spec in self.entries]
        self.train = np.stack([spec.build(game).table for spec in train_specs])
        self._cache: tuple[bytes, tuple] | None = None

    def tables(self, table: np.ndarray) -> np.ndarray:
        """`[K, 12, 2]`: every rollout opponent's table (the best response computed at `table`)."""
        table = np.asarray(table, dtype=float)
        return np.stack([kuhn_exact.best_response(table) if fixed is None else fixed for fixed in self.fixed])

    def _rates(self, table: np.ndarray) -> tuple:
        """(c, D_c, x, D_x): each rate over decisions at `table` (the ratio of the weighted sums of
        its events and of the decisions, weighted by the entries' credits) and the mean decisions
        per hand behind it; rates over hands (rigorous externality) have D = 1 and need no c."""
        table = np.asarray(table, dtype=float)
        if self._cache is None or self._cache[0] != table.tobytes():
            expected = np.stack([hand_expectations(table, opponent) for opponent in self.tables(table)])
            out = []
            for weight, events in ((self.mixture.collusion, FOLDS), (self.mixture.externality, BIG_LOSSES)):
                decisions = weight @ expected[:, DECISIONS]
                out += [
                    weight @ expected[:, events] / decisions if decisions else 0.0,
                    decisions / max(weight.sum(), 1e-300),
                ]
            self._cache = (table.tobytes(), tuple(out))
        return self._cache[1]

    def charged(
        self, table: np.ndarray, opponent, folds, decisions, big_losses
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per rollout against entry `opponent` with its FOLDs, decisions and 2-chip losses (counts,
        or their expectations to go): the credited (collusion, externality) charges."""
        collusion_rate, collusion_decisions, loss_rate, loss_decisions = self._rates(table)
        folds, decisions, big_losses = (np.asarray(v, dtype=float) for v in (folds, decisions, big_losses))
        collusion = (
            self.mixture.collusion[opponent]
            * (folds - collusion_rate * decisions)
            / max(collusion_decisions, 1e-300)
        )
        if self.protocol != "paper":  # no collusion under rigorous (evaluation's events count none)
            collusion = np.zeros_like(collusion)
        if self.protocol == "paper":
            externality = (
                self.mixture.externality[opponent]
                * (big_losses - loss_rate * decisions)
                / max(loss_decisions, 1e-300)
            )
        else:
            externality = self.mixture.externality[opponent] * big_losses
        return collusion, externality


class KuhnTrainingEnvironment:
    keys = INFO_STATES
    legal = np.ones((len(INFO_STATES), 2), dtype=bool)

    def __init__(self, game, train_specs, collusive_specs, exploiter_specs=(), charges: Charges = Charges()):
        self.solver = kuhn_exact.KuhnSolver(game)
        self.scale = game.payoff_scale
        self.charges = KuhnCharges(game, train_specs, collusive_specs, exploiter_specs, charges)
        self.mixture = self.charges.mixture
        self.opponents = self.charges.train
        self._reach: tuple[bytes, np.ndarray] | None = None

    def reach_external(self, table: np.ndarray) -> np.ndarray:
        """The opponents' and chance's part of the training reach (the best response's, where it is
        a rollout opponent, at `table`)."""
        table = np.asarray(table, dtype=float)
        key = table.tobytes() if any(fixed is None for fixed in self.charges.fixed) else b""
        if self._reach is None or self._reach[0] != key:
            self._reach = (key, kuhn_exact.external_reach(self.charges.tables(table)))
        return self._reach[1]

    def training_reach(self, table: np.ndarray) -> np.ndarray:
        return kuhn_exact.own_reach(table) * self.reach_external(table)

    def events(self, folds, payoff):
        """Per hand (its FOLD count, its payoff): the counts `events` gives a one-hand episode under
        the game's protocol: (collusion events, its FOLDs under `paper` only; externality events, a
        2-chip loss)."""
        folds = np.asarray(folds, dtype=float)
        return (folds if self.charges.protocol == "paper" else np.zeros(folds.shape),
                (np.asarray(payoff) <= -2).astype(float))

    def rollouts(self, table: np.ndarray, groups: int, group_size: int, rng: np.random.Generator) -> Rollouts:
        group_opponent = rng.integers(self.mixture.size, size=groups)
        group_seat = rng.integers(2, size=groups)
        group_deal = rng.integers(len(DEALS), size=groups)
        group_of = np.repeat(np.arange(groups), group_size)
        opponent = group_opponent[group_of]
        hands = play_hands(
            table,
            self.charges.tables(table),
            opponent,
            group_seat[group_of],
            group_deal[group_of],
            rng.random((len(group_of), 3)),
        )
        collusion, externality = self.charges.charged(table, opponent, hands.folds, hands.mask.sum(1),
                                                      (hands.payoff <= -2).astype(float))
        return Rollouts(
            hands.states,
            hands.actions,
            hands.mask,
            group_of,
            self.mixture.utility[opponent] * hands.payoff,
            collusion,
            externality,
        )

    def exact_metrics(self, table: np.ndarray) -> dict:
        utility = float(kuhn_exact.head_to_head(table, self.opponents).mean())
        nash_conv = float(kuhn_exact.nash_conv(table))
        return {"utility": utility, "exploitability": nash_conv / 2, "nash_conv": nash_conv}
